//! Unit tests of `edge.rs`.

use super::Held;

/// Answers held behind owed replies go right after the last of them,
/// in request order, and a request answered while answers wait waits
/// too (a lane's replies come in order).
#[test]
fn held_answers_follow_the_replies_owed_before_them() {
    let mut h = Held::default();
    assert!(!h.must_wait(0));
    // Two calls crossed; a read answered here comes third.
    assert!(h.must_wait(2));
    h.hold(2, b"A".to_vec());
    assert!(h.replied().is_empty());
    // One reply still owed; a later read is answered here too, and
    // one with nothing owed must still wait behind A.
    h.hold(1, b"B".to_vec());
    assert!(h.must_wait(0));
    assert_eq!(h.replied(), vec![b"A".to_vec(), b"B".to_vec()]);
    assert!(!h.must_wait(0));
    // One call crossed, then two answers; a second call crossed after
    // them: its reply (the second) must not release anything more.
    h.hold(1, b"C".to_vec());
    h.hold(1, b"D".to_vec());
    assert_eq!(h.replied(), vec![b"C".to_vec(), b"D".to_vec()]);
    assert!(h.replied().is_empty());
}

/// A read waiting for a read-ahead reply keeps its place: answers
/// behind it wait for it, and it goes only once both its answer came
/// and the replies owed before it are in the ring; an answer that came
/// before the place was taken is used when it is.
#[test]
fn a_waiting_read_keeps_its_place_among_answers() {
    let mut h = Held::default();
    // One call crossed; read 5 waits; read 6 is answered from copies.
    h.wait(1, 5);
    h.hold(1, b"B".to_vec());
    assert!(h.due().is_empty());
    h.fill(5, b"A".to_vec());
    assert!(h.due().is_empty(), "a reply is owed before them");
    assert_eq!(h.replied(), vec![b"A".to_vec(), b"B".to_vec()]);
    // Nothing owed: a waiting read goes when its answer comes.
    h.wait(0, 7);
    h.hold(0, b"D".to_vec());
    assert!(h.due().is_empty(), "D waits behind 7");
    h.fill(7, b"C".to_vec());
    assert_eq!(h.due(), vec![b"C".to_vec(), b"D".to_vec()]);
    // The answer came first.
    h.fill(8, b"E".to_vec());
    h.wait(0, 8);
    assert_eq!(h.due(), vec![b"E".to_vec()]);
    assert!(h.early.is_empty());
}
