"""One module per data source kind: each turns its raw rows into `Problem`s."""
