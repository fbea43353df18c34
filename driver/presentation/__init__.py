"""What a person reads about the node: the topology table and picture, and the claims drawn on it.

It sits above the inventory and the state it shows and below the commands that print it: the
inventory layer only discovers, and nothing the running driver serves imports this package.
"""
