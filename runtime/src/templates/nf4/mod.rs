//! The nf4 kernel family.
