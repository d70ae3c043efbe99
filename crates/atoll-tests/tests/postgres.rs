//! PostgreSQL with its data directory in the mount: `initdb`, the server
//! (a postmaster forking backends, its Unix socket in the data directory,
//! shared memory, `fsync`, WAL), `pgbench` with four clients, a clean stop
//! and an immediate one (crash recovery from the WAL at the next start),
//! compared with the same script on tmpfs. The database's own invariant
//! (the balances sum to the history's deltas) must hold after each start.

use atoll_tests::{assert_same_on_tmpfs, require};

const SCRIPT: &str = r#"
set -e
B=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
D="$ROOT/pgdata"
chmod 755 "$ROOT"
mkdir "$D"
chown nobody:nogroup "$D"
as_pg() { setpriv --reuid nobody --regid nogroup --clear-groups -- "$@"; }
stop() { as_pg "$B/pg_ctl" -D "$D" -m "$1" stop >/dev/null; }
# A failed step must not leave a server behind to keep the run alive.
trap 'stop immediate 2>/dev/null || true' EXIT
start() {
    as_pg "$B/pg_ctl" -D "$D" -o "-k $D -c listen_addresses=" -l "$D/log" -w start >/dev/null \
        || { cat "$D/log"; exit 1; }
}
sql() { as_pg psql -X -h "$D" -Atc "$1" postgres; }
check() {
    sql "select count(*) from pgbench_history"
    sql "select sum(abalance) = (select sum(delta) from pgbench_history) from pgbench_accounts"
}
as_pg "$B/initdb" -D "$D" -A trust -E UTF8 --no-locale >/dev/null
start
as_pg pgbench -h "$D" -i -s 1 postgres >/dev/null 2>&1
as_pg pgbench -h "$D" -c 4 -j 2 -t 100 postgres 2>&1 \
    | grep -E 'actually processed|failed transactions'
check
stop fast
start
check
# -n: no vacuum, and pgbench_history is not truncated first.
as_pg pgbench -n -h "$D" -c 2 -t 50 postgres >/dev/null 2>&1
stop immediate
start
check
sql "select count(*) from pgbench_accounts"
stop fast
trap - EXIT
grep -c 'database system is ready to accept connections' "$D/log"
grep -c 'redo done' "$D/log"
"#;

fn require_postgres() {
    require("pgbench");
    require("psql");
    require("setpriv");
    let server = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.flatten().any(|v| v.path().join("bin/initdb").is_file()))
        .unwrap_or(false);
    assert!(
        server,
        "the PostgreSQL server is not installed; .ci/run installs it (apt-get install postgresql)"
    );
}

#[test]
fn postgres_initdb_pgbench_and_crash_recovery_match_tmpfs() {
    require_postgres();
    let out = assert_same_on_tmpfs(&["--servers", "3"], SCRIPT, false);
    assert!(
        out.contains("number of transactions actually processed: 400/400"),
        "{out}"
    );
    assert!(out.contains("number of failed transactions: 0"), "{out}");
    // After the immediate stop: every committed transaction was recovered,
    // and three starts, one of them a recovery from the WAL.
    assert!(out.ends_with("500\nt\n100000\n3\n1\n"), "{out}");
}
