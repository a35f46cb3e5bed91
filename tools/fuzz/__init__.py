"""The differential fuzzer: grammar programs run original against mended, every observable compared."""
