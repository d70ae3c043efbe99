//! The mount as programs expect to see it: `/proc/self/mounts`,
//! `/proc/self/mountinfo` and `statfs` present `/atoll` as a file system of
//! type `atoll`, so `df`, `df -i`, `findmnt`, `mount` and `stat -f` show it
//! with the instance's real numbers.

use atoll_tests::{require, run_in_atoll};

#[test]
fn df_findmnt_and_mount_show_the_instance_with_its_real_numbers() {
    require("findmnt");
    let out = run_in_atoll(
        &["--servers", "2", "--memory", "64M", "--inodes", "5000"],
        r#"
        set -e
        mkdir /atoll/d && for i in $(seq 10); do head -c 8192 /dev/zero > /atoll/d/f$i; done
        # (into a host file: an atoll pipe's ring would count as used blocks)
        t=$(mktemp) && df -B4096 --output=fstype,size,used,itotal,iused,target /atoll > $t
        tail -1 $t && rm $t
        findmnt -n -o TARGET,SOURCE,FSTYPE /atoll
        mount | grep -c '^atoll on /atoll type atoll'
        grep -c '^atoll /atoll atoll ' /proc/self/mounts
        stat -f -c '%b %c' /atoll
        "#,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        lines.len(),
        5,
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 64 MiB of 4 KiB blocks, 10 files of two blocks each; 5000 inodes of
    // which the root, one directory and ten files are used.
    assert_eq!(
        lines[0],
        ["atoll", "16384", "20", "5000", "12", "/atoll"],
        "{stdout}"
    );
    assert_eq!(lines[1], ["/atoll", "atoll", "atoll"]);
    assert_eq!(lines[2], ["1"]);
    assert_eq!(lines[3], ["1"]);
    assert_eq!(lines[4], ["16384", "5000"]);
}
