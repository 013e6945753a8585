pub mod embedded;
