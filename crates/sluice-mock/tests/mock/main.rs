//! The mock over real sockets, on HTTP/1.1 and HTTP/2.

mod azure;
mod bedrock;
mod cancel;
mod errors;
mod faults;
mod gemini;
mod keepalive;
mod knobs;
mod policy;
mod prefill;
mod shapes;
mod support;
mod tls;
mod vertex;
