"""Driver logic behind :class:`driver.plugin.DriverPlugin`: prepare and unprepare claims."""
