//! Every request's name and index, for the per-operation counters that
//! `atoll status`, `atoll top` and traces report.

use atoll_proto::Request;

pub(super) const OP_NAMES: [&str; 65] = [
    "SetGroups",
    "Lookup",
    "Open",
    "MakeNode",
    "Link",
    "Unlink",
    "Rename",
    "ReadDir",
    "SetParent",
    "MarkRmdir",
    "FinishRmdir",
    "GetAttr",
    "SetAttr",
    "Access",
    "ReadLink",
    "Ref",
    "Unref",
    "OpenInode",
    "GetXattr",
    "SetXattr",
    "ListXattr",
    "RemoveXattr",
    "Fallocate",
    "MapBlocks",
    "Read",
    "Write",
    "ReadData",
    "WriteData",
    "Seek",
    "SetFlags",
    "Share",
    "Close",
    "SetLock",
    "GetLock",
    "StatFs",
    "Stats",
    "ClientCounters",
    "Reclaim",
    "MoveDone",
    "Relink",
    "Pipe",
    "PipeHeader",
    "CreateInode",
    "Adopt",
    "RenameLock",
    "CreateTmpfile",
    "PassLocks",
    "Map",
    "Unmap",
    "Exec",
    "Subdirs",
    "InotifyInit",
    "InotifyAddWatch",
    "InotifyRmWatch",
    "InotifyRegister",
    "InotifyModified",
    "WriteDone",
    "Touched",
    "DirMode",
    "Adapt",
    "PipeRead",
    "PipeWrite",
    "PipeState",
    "PipeSetSize",
    "Names",
];

/// Requests after which the server holds nothing it did not hold before,
/// except lookup-tracking records (which a rebuilt server does without:
/// it tells every client to drop its cached lookups instead). The journal
/// skips them (`crate::journal`).
pub fn changes_nothing(req: &Request<'_>) -> bool {
    use Request::*;
    matches!(
        req,
        Lookup { .. }
            | GetAttr { .. }
            | Access { .. }
            | ReadLink { .. }
            | GetXattr { .. }
            | ListXattr { .. }
            | GetLock { .. }
            | StatFs { .. }
            | Stats { .. }
            | Names { .. }
    )
}

pub(super) fn op_index(req: &Request<'_>) -> usize {
    use Request::*;
    match req {
        SetGroups { .. } => 0,
        Lookup { .. } => 1,
        Open { .. } => 2,
        MakeNode { .. } => 3,
        Link { .. } => 4,
        Unlink { .. } => 5,
        Rename { .. } => 6,
        ReadDir { .. } => 7,
        SetParent { .. } => 8,
        MarkRmdir { .. } => 9,
        FinishRmdir { .. } => 10,
        GetAttr { .. } => 11,
        SetAttr { .. } => 12,
        Access { .. } => 13,
        ReadLink { .. } => 14,
        Ref { .. } => 15,
        Unref { .. } => 16,
        OpenInode { .. } => 17,
        GetXattr { .. } => 18,
        SetXattr { .. } => 19,
        ListXattr { .. } => 20,
        RemoveXattr { .. } => 21,
        Fallocate { .. } => 22,
        MapBlocks { .. } => 23,
        Read { .. } => 24,
        Write { .. } => 25,
        ReadData { .. } => 26,
        WriteData { .. } => 27,
        Seek { .. } => 28,
        SetFlags { .. } => 29,
        Share { .. } => 30,
        Close { .. } => 31,
        SetLock { .. } => 32,
        GetLock { .. } => 33,
        StatFs => 34,
        Stats => 35,
        ClientCounters(_) => 36,
        Reclaim { .. } => 37,
        MoveDone { .. } => 38,
        Relink { .. } => 39,
        Pipe { .. } => 40,
        PipeHeader { .. } => 41,
        CreateInode { .. } => 42,
        Adopt { .. } => 43,
        RenameLock { .. } => 44,
        CreateTmpfile { .. } => 45,
        PassLocks { .. } => 46,
        Map { .. } => 47,
        Unmap { .. } => 48,
        Exec { .. } => 49,
        Subdirs { .. } => 50,
        InotifyInit { .. } => 51,
        InotifyAddWatch { .. } => 52,
        InotifyRmWatch { .. } => 53,
        InotifyRegister { .. } => 54,
        InotifyModified { .. } => 55,
        WriteDone { .. } => 56,
        Touched { .. } => 57,
        DirMode { .. } => 58,
        Adapt { .. } => 59,
        PipeRead { .. } => 60,
        PipeWrite { .. } => 61,
        PipeState { .. } => 62,
        PipeSetSize { .. } => 63,
        Names { .. } => 64,
    }
}
