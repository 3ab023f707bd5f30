//! Unit and property tests of the balancer on made-up instants.
