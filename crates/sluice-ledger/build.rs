//! Marks the tests that need a real PostgreSQL server ignored (with the reason) when its
//! binaries are not installed; see tests/build/test_env.rs. Under `CI=true` they always run
//! (and fail without the server).

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn main() {
    test_env::cfg_when_missing("no_postgres", !test_env::postgres());
}
