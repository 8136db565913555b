//! Filebench on PMOs.
