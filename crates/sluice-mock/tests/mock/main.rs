//! The mock over real sockets, on HTTP/1.1 and HTTP/2.

mod cancel;
mod faults;
mod knobs;
mod shapes;
mod support;
mod tls;
