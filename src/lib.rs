pub mod engine;
pub mod rewrite;
