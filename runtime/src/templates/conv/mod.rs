//! The conv kernel family.
