"""One module per group of `rules` commands; cli.main registers them."""
