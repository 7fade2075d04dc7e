"""Storage: the store seam both stores implement (memory and SQLite), its rows and its errors."""
