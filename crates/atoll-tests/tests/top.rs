//! `atoll top`: the one-shot JSON sample and the live view in a
//! pseudo-terminal both show the instance's servers and a busy client
//! process by name, with non-zero rates.

use atoll_tests::OutputBounded as _;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use atoll_tests::{atoll, output_within, require, RUN_LIMIT};

/// A booted instance with a client process that keeps creating and
/// reading files until the instance stops.
struct Busy {
    id: String,
    worker: Child,
    _dir: tempfile::TempDir,
}

impl Busy {
    fn start() -> Busy {
        let out = atoll()
            .args(["boot", "--servers", "2", "--memory", "64M"])
            .output_bounded()
            .expect("atoll boot");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        // A shell under a name of its own, so its row is recognisable.
        let dir = tempfile::tempdir().unwrap();
        let probe = dir.path().join("topprobe");
        std::fs::copy("/bin/sh", &probe).unwrap();
        let worker = atoll()
            .args(["exec", "--id", &id, "--"])
            .arg(&probe)
            .args([
                "-c",
                // All in one directory, so it is the instance's hot one.
                // Ends by itself once the instance is gone (calls fail).
                "mkdir /atoll/hotd && i=0; while echo $i > /atoll/hotd/f$((i % 200)) && read x < /atoll/hotd/f$((i % 200)); do i=$((i+1)); done",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so that dropping it ends the worker
            // too, not only `atoll exec`.
            .process_group(0)
            .spawn()
            .expect("atoll exec");
        // Wait until the worker's session exists.
        for _ in 0..200 {
            if status_json(&id).contains("\"clients\": 1") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        Busy {
            id,
            worker,
            _dir: dir,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The worker's whole process group.
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.worker.id())])
            .status();
        let _ = self.worker.wait();
        let _ = atoll().args(["stop", "--id", &self.id]).output_bounded();
    }
}

/// The inode number of `path` inside instance `id`, as its programs see it.
fn inode_in(id: &str, path: &str) -> u64 {
    let out = atoll()
        .args(["exec", "--id", id, "--", "stat", "-c", "%i", path])
        .output_bounded()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("stat {path}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn status_json(id: &str) -> String {
    let out = atoll()
        .args(["status", "--id", id, "--json"])
        .output_bounded()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn once_json_shows_servers_and_the_busy_client() {
    let busy = Busy::start();
    let mut cmd = atoll();
    cmd.args([
        "top",
        "--id",
        &busy.id,
        "--once",
        "--json",
        "--interval",
        "0.5",
    ]);
    let out = output_within(cmd, RUN_LIMIT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let servers = v["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2);
    assert!(
        servers
            .iter()
            .any(|s| s["ops_per_s"].as_f64().unwrap() > 0.0),
        "no server served anything: {v}"
    );
    let clients = v["clients"].as_array().unwrap();
    let probe = clients
        .iter()
        .find(|c| c["command"] == "topprobe")
        .unwrap_or_else(|| panic!("no topprobe row: {v}"));
    assert!(probe["pid"].as_u64().unwrap() > 0);
    assert!(probe["ops_per_s"].as_f64().unwrap() > 0.0, "{probe}");
    // The directory the worker creates files in leads the directory pane,
    // named by its path, with the servers that saw it.
    let ino = inode_in(&busy.id, "/atoll/hotd");
    let dirs = v["dirs"].as_array().expect("dirs");
    let hot = dirs
        .iter()
        .find(|d| d["ino"].as_u64() == Some(ino))
        .unwrap_or_else(|| panic!("no row for /atoll/hotd ({ino}): {v}"));
    assert_eq!(hot["path"], "/atoll/hotd", "{hot}");
    assert!(hot["ops_per_s"].as_f64().unwrap() > 0.0, "{hot}");
    assert!(!hot["servers"].as_array().unwrap().is_empty(), "{hot}");
    assert_eq!(hot["distributed"], false, "{hot}");
}

/// The final screen a terminal of `rows`x`cols` shows after `raw`: enough
/// of a terminal to follow what the view writes (cursor positioning,
/// clears, text; styles ignored).
fn screen(raw: &[u8], rows: usize, cols: usize) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut grid = vec![vec![' '; cols]; rows];
    let (mut r, mut c) = (0usize, 0usize);
    let mut chars = text.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\x1b' => {
                if chars.peek() != Some(&'[') {
                    chars.next();
                    continue;
                }
                chars.next();
                let mut params = String::new();
                let mut fin = ' ';
                for d in chars.by_ref() {
                    if ('@'..='~').contains(&d) {
                        fin = d;
                        break;
                    }
                    params.push(d);
                }
                let nums: Vec<usize> = params
                    .trim_start_matches('?')
                    .split(';')
                    .map(|n| n.parse().unwrap_or(0))
                    .collect();
                match fin {
                    'H' | 'f' => {
                        r = nums.first().copied().unwrap_or(1).max(1) - 1;
                        c = nums.get(1).copied().unwrap_or(1).max(1) - 1;
                    }
                    'J' if params == "2" => grid.iter_mut().for_each(|l| l.fill(' ')),
                    _ => {}
                }
            }
            '\r' => c = 0,
            '\n' => r += 1,
            _ => {
                if r < rows && c < cols {
                    grid[r][c] = ch;
                }
                c += 1;
            }
        }
    }
    grid.iter()
        .map(|l| l.iter().collect::<String>().trim_end().to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn live_view_in_a_pseudo_terminal_shows_rows_and_quits_on_q() {
    require("python3");
    let busy = Busy::start();
    // python's pty module gives the view a real terminal of 140x40; it
    // reads the screen for a while, presses `s` then `q`, and passes
    // everything the view wrote through.
    let driver = r#"
import os, pty, sys, time, fcntl, termios, struct, select
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 140, 0, 0))
out = b""
def pump(secs):
    global out
    end = time.time() + secs
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.05)
        if r:
            try:
                out += os.read(fd, 65536)
            except OSError:
                return
pump(2.5)
os.write(fd, b"s")
pump(0.8)
os.write(fd, b"q")
pump(2.0)
_, status = os.waitpid(pid, 0)
sys.stdout.buffer.write(out)
sys.stderr.write("exit=%d\n" % os.waitstatus_to_exitcode(status))
"#;
    let bin = atoll_tests::atoll_bin();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", driver])
        .arg(&bin)
        .args(["top", "--id", &busy.id, "--interval", "0.4"])
        .env("TERM", "xterm-256color");
    let out = output_within(cmd, RUN_LIMIT);
    let screen = screen(&out.stdout, 40, 140);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("exit=0"),
        "top did not quit cleanly on q: {err}\n{screen}"
    );
    for want in [
        "servers",
        "busiest ops",
        "client processes",
        "by traps/s",
        "hot directories",
    ] {
        assert!(
            screen.contains(want),
            "`{want}` not on the screen:\n{screen}"
        );
    }
    // A row per server, and the worker's row with its name.
    let cells = |l: &str| {
        l.trim_matches(|c: char| c == '│' || c.is_whitespace())
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for server in ["0", "1"] {
        assert!(
            screen.lines().any(|l| {
                let c = cells(l);
                // server, core, ops/s, busy%, ring B, lanes, used/owned blocks
                c.first().map(String::as_str) == Some(server)
                    && c.get(6).is_some_and(|b| b.contains('/'))
            }),
            "no row for server {server}:\n{screen}"
        );
    }
    assert!(
        screen
            .lines()
            .any(|l| cells(l).get(2).map(String::as_str) == Some("topprobe")),
        "no row for the worker:\n{screen}"
    );
    // The worker's directory in the directory pane: inode, not
    // distributed, a rate, the servers, its path.
    let ino = inode_in(&busy.id, "/atoll/hotd").to_string();
    assert!(
        screen.lines().any(|l| {
            let c = cells(l);
            c.len() == 5
                && c[0] == ino
                && c[1] == "no"
                && c[2].parse::<f64>().is_ok_and(|r| r > 0.0)
                && c[4] == "/atoll/hotd"
        }),
        "no row for /atoll/hotd ({ino}) in the directory pane:\n{screen}"
    );
    // The terminal is given back: the alternate screen is left.
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("\x1b[?1049l"),
        "alternate screen not left"
    );
}
