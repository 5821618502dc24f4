//! ptxforge attribute macros.
