"""Small helpers every part of the plan uses: errors, units, memoisation, paths, reading files, field values."""
