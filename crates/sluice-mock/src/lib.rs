//! A real mock inference server with fault injection.
