//! Marks the tests that need a real `redis-server` (and, for the Cluster ones, `redis-cli`)
//! ignored (with the reason) when there is none; see tests/build/test_env.rs. Under `CI=true`
//! they always run.

#[path = "../../tests/build/test_env.rs"]
mod test_env;

fn main() {
    test_env::cfg_when_missing("no_redis", !test_env::redis_server());
    let cli = test_env::find_tool(&["redis-cli"], "REDIS_CLI");
    test_env::cfg_when_missing("no_redis_cli", cli.is_none());
}
