//! The attention kernel family.
