"""Scripts that produce data the product ships or the suite reads, and the builders they share with the tests."""
