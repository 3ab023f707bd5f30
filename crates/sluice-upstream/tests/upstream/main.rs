//! Integration tests over real sockets against `sluice-mock`.

mod backpressure;
mod balance;
mod balance_health;
mod cancel;
mod dns;
mod errors;
mod h1wire;
mod h2conn;
mod http1;
mod lanes;
mod ping;
mod pool;
mod scripted;
mod stale;
mod support;
mod timing;
mod tls;
