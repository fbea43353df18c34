"""A small Container Device Interface library: spec model, validation, naming, atomic writes."""
