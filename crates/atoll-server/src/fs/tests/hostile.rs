//! Bad input never wins: whatever frame a hostile or broken client puts
//! in its ring, the server answers it (usually with an errno) and stays
//! whole. Frames here are random bytes and mutations of well-formed
//! requests, decoded with the wire format the server loop uses
//! (`atoll_proto::decode`); every request ends with the server's own
//! self-checks (`check_size_board` and friends under `cfg(test)`), and a
//! file made afterwards still reads back what was written.

use super::*;

/// Well-formed requests about the state [`populated`] builds, encoded:
/// the seeds the mutations start from.
fn seeds(dir: InodeId, file: InodeId, desc: DescId) -> Vec<Vec<u8>> {
    let reqs = [
        Request::Lookup { dir, name: b"f" },
        Request::Open {
            dir,
            name: b"g",
            flags: RW | CREAT,
            perm: 0o644,
            umask: 0o022,
            inherit: atoll_proto::Inherit::Unread,
        },
        Request::Read {
            desc,
            len: 4096,
            offset: Some(0),
        },
        Request::Write {
            desc,
            len: 9000,
            offset: Some(4000),
            fsize: None,
        },
        Request::WriteData {
            desc,
            data: b"hostile",
            offset: None,
            fsize: None,
            chain: None,
        },
        Request::SetAttr {
            ino: file,
            set: SetAttr {
                size: Some(10),
                ..SetAttr::NONE
            },
            via: None,
        },
        Request::Rename {
            olddir: dir,
            oldname: b"f",
            newdir: ROOT,
            newname: b"moved",
            flags: 0,
        },
        Request::ReadDir {
            dir,
            cookie: 0,
            max_bytes: 4096,
            epoch: 0,
        },
        Request::Seek {
            desc,
            offset: 3,
            whence: libc::SEEK_END as u32,
        },
        Request::Fallocate {
            ino: file,
            mode: 0,
            offset: 0,
            len: 1 << 20,
        },
        Request::Map {
            ino: file,
            to: S2,
            mapping: 7,
        },
        Request::Close { desc },
    ];
    let mut buf = vec![0u8; atoll_proto::MAX_FRAME];
    reqs.iter()
        .filter_map(|r| atoll_proto::encode(r, &mut buf).ok().map(|b| b.to_vec()))
        .collect()
}

/// A server with a directory, a file with data and open descriptions in
/// two sessions.
fn populated() -> (T, InodeId, InodeId, DescId) {
    let mut t = server(256);
    let dir = t.mkdir(ROOT, "d");
    let (desc, file) = t.create(dir, "f");
    t.write(S1, desc, &[7u8; 10_000], Some(0)).unwrap();
    let (other, _) = t.open_as(S2, USER, dir, "f", RW, 0).unwrap();
    t.write(S2, other, b"second", None).unwrap();
    (t, dir, file, desc)
}

/// One frame: random bytes (no seed), or seed `i` with some bytes
/// replaced (`(at, value)` edits).
type Frame = (Option<usize>, Vec<u8>, Vec<(usize, u8)>);

fn frame() -> impl Strategy<Value = Frame> {
    (
        proptest::option::of(0usize..64),
        proptest::collection::vec(any::<u8>(), 0..96),
        proptest::collection::vec((0usize..128, any::<u8>()), 1..6),
    )
}

fn play(t: &mut T, seeds: &[Vec<u8>], frames: &[Frame]) {
    let sessions = [S1, S2, SessionId(3)];
    let creds = [USER, OTHER, ROOTC];
    for (n, (seed, random, edits)) in frames.iter().enumerate() {
        let bytes = match seed {
            Some(i) => {
                let mut b = seeds[i % seeds.len()].clone();
                for &(at, v) in edits {
                    if !b.is_empty() {
                        let at = at % b.len();
                        b[at] = v;
                    }
                }
                b
            }
            None => random.clone(),
        };
        let Ok(req) = atoll_proto::decode::<Request>(&bytes) else {
            continue; // the loop answers EPROTO without calling the server
        };
        let _ = t.call(sessions[n % 3], creds[(n / 3) % 3], req);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]
    /// Random and mutated frames never crash the server, and it goes on
    /// serving: a new file reads back what was written to it.
    #[test]
    fn hostile_frames_get_answers_and_leave_the_server_whole(
        frames in proptest::collection::vec(frame(), 1..40)
    ) {
        let (mut t, dir, file, desc) = populated();
        let seeds = seeds(dir, file, desc);
        play(&mut t, &seeds, &frames);
        let name = "after-the-storm";
        let (d, _) = t.open_as(S1, ROOTC, ROOT, name, RW | CREAT, 0o644).unwrap();
        match t.write(S1, d, b"still here", Some(0)) {
            Ok(n) => {
                prop_assert_eq!(n, 10);
                prop_assert_eq!(t.read(S1, d, 64, Some(0)).unwrap(), b"still here".to_vec());
            }
            // A hostile client may fill the memory with its own files
            // (`fallocate`): then, and only then, a write finds no space.
            Err(e) => {
                let s = t.stats();
                prop_assert_eq!(e, Errno::ENOSPC);
                prop_assert!(s.blocks_used + 2 >= s.blocks_total, "{e:?} with {} of {} blocks used", s.blocks_used, s.blocks_total);
            }
        }
        t.close(S1, d);
    }
}
