pub mod dialect;
