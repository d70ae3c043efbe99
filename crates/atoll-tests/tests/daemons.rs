//! Servers people run with their data in the mount, compared with the same
//! script on tmpfs: Redis (its append-only file, a background save by a
//! forked child, a restart that loads both) and nginx (files sent with
//! `sendfile` from the mount, uploads through its temporary files), both
//! listening on Unix sockets in the mount.

use atoll_tests::{assert_same_on_tmpfs, require};

#[test]
fn redis_keeps_its_data_across_a_background_save_and_a_restart() {
    require("redis-server");
    require("redis-cli");
    let out = assert_same_on_tmpfs(
        &["--servers", "3"],
        r#"
        set -e
        D="$ROOT/redis"; mkdir "$D"; cd "$D"
        cli() { redis-cli -s "$D/sock" "$@"; }
        up() {
            redis-server --port 0 --unixsocket "$D/sock" --dir "$D" --appendonly yes \
                --daemonize yes --logfile "$D/log" --pidfile "$D/pid"
            for i in $(seq 100); do cli ping >/dev/null 2>&1 && return; sleep 0.1; done
            cat "$D/log"; exit 1
        }
        up
        for i in $(seq 1 300); do echo "SET key$i value$i"; echo "RPUSH list $i"; done | cli >/dev/null
        cli bgsave >/dev/null
        until [ "$(cli info persistence | tr -d '\r' | grep -c '^rdb_bgsave_in_progress:0')" = 1 ]; do sleep 0.1; done
        cli bgrewriteaof >/dev/null
        until [ "$(cli info persistence | tr -d '\r' | grep -c '^aof_rewrite_in_progress:0')" = 1 ]; do sleep 0.1; done
        cli set after-rewrite yes >/dev/null
        cli info persistence | tr -d '\r' | grep -e '^rdb_last_bgsave_status' -e '^aof_last_bgrewrite_status'
        cli shutdown >/dev/null 2>&1 || true
        while [ -e "$D/pid" ]; do sleep 0.1; done
        ls "$D" | sort
        up
        cli dbsize; cli get key123; cli llen list; cli get after-rewrite
        cli shutdown nosave >/dev/null 2>&1 || true
        while [ -e "$D/pid" ]; do sleep 0.1; done
        "#,
        false,
    );
    assert!(out.contains("302\nvalue123\n300\nyes\n"), "{out}");
}

#[test]
fn nginx_serves_and_stores_files_of_the_mount() {
    require("nginx");
    require("curl");
    let out = assert_same_on_tmpfs(
        &["--servers", "2"],
        r#"
        set -e
        D="$ROOT/ngx"; mkdir -p "$D/html/up" "$D/logs" "$D/tmp"; chmod -R 777 "$D/html/up" "$D/tmp"
        chmod 755 "$ROOT" "$D" "$D/html"
        head -c 3000000 /dev/urandom > "$D/html/big.bin"; echo hello > "$D/html/index.html"
        {
            echo "worker_processes 2; daemon on; pid $D/nginx.pid; error_log $D/logs/error.log;"
            echo "events { worker_connections 64; }"
            echo "http { sendfile on; access_log $D/logs/access.log; client_body_temp_path $D/tmp;"
            echo "  proxy_temp_path $D/tmp; fastcgi_temp_path $D/tmp; uwsgi_temp_path $D/tmp; scgi_temp_path $D/tmp;"
            echo "  server { listen unix:$D/web.sock; root $D/html;"
            echo "    location /up { client_max_body_size 10m; dav_methods PUT; } } }"
        } > "$D/nginx.conf"
        nginx -e "$D/logs/error.log" -c "$D/nginx.conf" -p "$D"
        get() { curl -sf --unix-socket "$D/web.sock" "http://x/$1"; }
        for i in $(seq 50); do get index.html >/dev/null 2>&1 && break; sleep 0.1; done
        get index.html
        get big.bin | cmp - "$D/html/big.bin" && echo sent whole
        curl -sf --unix-socket "$D/web.sock" -T "$D/html/big.bin" http://x/up/put.bin -o /dev/null -w '%{http_code}\n'
        cmp "$D/html/up/put.bin" "$D/html/big.bin" && echo stored whole
        get missing.html || echo "missing: $?"
        nginx -e "$D/logs/error.log" -c "$D/nginx.conf" -p "$D" -s quit
        while [ -e "$D/nginx.pid" ]; do sleep 0.1; done
        wc -l < "$D/logs/access.log"
        grep -c -e '\[crit\]' -e '\[alert\]' -e '\[emerg\]' "$D/logs/error.log" || true
        "#,
        false,
    );
    assert!(
        out.contains("hello\nsent whole\n201\nstored whole\nmissing: 22\n"),
        "{out}"
    );
}
