//! Symbolization checked on the test binary itself (live root), on fake `--root` trees (a
//! process's maps pointing at real ELF files, a container root, a replaced and a stripped
//! binary, perf maps good, malformed, overlapping and huge), on a process that does not exist,
//! and on kallsyms, readable and hidden.
use std::fs;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};

use object::{Object, ReadCache};

use super::maps::Maps;
use super::perf_map::{PerfMap, PerfMapCaps};
use super::*;

#[inline(never)]
fn symbols_test_leaf_function() -> u64 {
    std::hint::black_box(7)
}

#[inline(never)]
fn symbols_test_caller_function() -> u64 {
    std::hint::black_box(symbols_test_leaf_function() + 1)
}

fn leaf_addr() -> u64 {
    symbols_test_leaf_function as fn() -> u64 as usize as u64
}

fn caller_addr() -> u64 {
    symbols_test_caller_function as fn() -> u64 as usize as u64
}

/// The test binary's mapping holding `addr`, from our own maps.
fn own_mapping(addr: u64) -> maps::Mapping {
    let maps = Maps::read(Path::new("/proc/self/maps"), 16 << 20, 100_000).expect("own maps");
    let i = maps.find(addr).expect("own code is mapped");
    maps.mappings[i].clone()
}

fn exe_build_id() -> Option<String> {
    let f = fs::File::open("/proc/self/exe").expect("own exe");
    let cache = ReadCache::new(f);
    let obj = object::File::parse(&cache).expect("own exe parses");
    let id = obj.build_id().expect("note readable")?;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

#[test]
fn own_functions_resolve_with_build_id_and_line() {
    let mut s = Symbolizer::new(Path::new("/"));
    // The caller is a return address: looked up one byte earlier, so give one past its start.
    let frames = s.user_frames(std::process::id(), &[leaf_addr(), caller_addr() + 1]);
    assert_eq!(frames.len(), 2);
    let leaf = &frames[0];
    assert_eq!(leaf.kind, FrameKind::User);
    let name = leaf.function.as_deref().unwrap_or_default();
    assert!(name.contains("symbols_test_leaf_function"), "{leaf:?}");
    let caller = frames[1].function.as_deref().unwrap_or_default();
    assert!(
        caller.contains("symbols_test_caller_function"),
        "{:?}",
        frames[1]
    );
    let exe = fs::canonicalize("/proc/self/exe").expect("own exe path");
    assert_eq!(leaf.module.as_deref(), exe.to_str());
    let want = exe_build_id();
    assert!(want.is_some(), "the test binary has a GNU build ID");
    assert_eq!(leaf.build_id, want);
    assert!(
        leaf.file
            .as_deref()
            .unwrap_or_default()
            .ends_with("tests.rs"),
        "{leaf:?}"
    );
    assert!(leaf.line.is_some(), "{leaf:?}");
    let m = own_mapping(leaf_addr());
    assert_eq!(leaf.offset, m.file_offset(leaf_addr()));
    let st = s.stats();
    assert_eq!((st.user_addresses, st.user_resolved), (2, 2), "{st:?}");
}

/// A live process's maps known in part (as the early read sent them): an address past them is
/// looked up alone in the kernel, not by reading every mapping again; an address in no
/// mapping is asked once.
#[test]
fn a_new_mapping_of_a_live_process_is_asked_of_the_kernel_alone() {
    let pid = std::process::id();
    let probe = fs::File::open("/proc/self/maps").expect("own maps");
    if let Err(e) = crate::sys::procmap::executable_at(&probe, leaf_addr()) {
        eprintln!("skipped: this kernel answers no PROCMAP_QUERY ({e}); maps are read whole");
        return;
    }
    let mut s = Symbolizer::new(Path::new("/"));
    let exe = fs::metadata("/proc/self/exe").expect("own exe");
    // Only a made-up library's code, far from the test binary's.
    s.prepare(
        pid,
        b"10000-11000 r-xp 00000000 08:01 99 /made/up/lib.so\n",
        Some((exe.dev(), exe.ino())),
    );
    let read_before = s.stats().maps_read;
    let f = &s.user_frames(pid, &[leaf_addr()])[0];
    assert!(
        f.function
            .as_deref()
            .unwrap_or_default()
            .contains("symbols_test_leaf_function"),
        "{f:?}"
    );
    assert_eq!(
        (s.stats().maps_read, s.stats().maps_queries),
        (read_before, 1)
    );
    s.user_frames(pid, &[0x20]);
    s.user_frames(pid, &[0x20, leaf_addr()]);
    assert_eq!(
        (s.stats().maps_read, s.stats().maps_queries),
        (read_before, 2)
    );
}

/// A process's stacks are resolved after it is gone through the maps read while it ran; the
/// empty maps of its exit (its executable no longer readable) do not replace them.
#[test]
fn maps_that_map_no_code_do_not_replace_those_read_while_it_ran() {
    let Ok(mut child) = std::process::Command::new("sleep").arg("5").spawn() else {
        eprintln!("skipped: no sleep(1) to run");
        return;
    };
    let pid = child.id();
    // Its maps once sleep's code is mapped (before, it is this test's fork, or mid-exec).
    let code = |t: &str| {
        t.lines()
            .find(|l| l.contains(" r-xp ") && l.ends_with("/sleep"))
            .map(str::to_string)
    };
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let (maps, line) = loop {
        let maps = fs::read(format!("/proc/{pid}/maps")).expect("the child's maps");
        if let Some(line) = code(&String::from_utf8_lossy(&maps)) {
            break (maps, line);
        }
        assert!(std::time::Instant::now() < end, "sleep's code never mapped");
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    let exe = fs::metadata(format!("/proc/{pid}/exe")).expect("the child's exe");
    let _ = child.kill();
    let _ = child.wait();
    let start = u64::from_str_radix(line.split('-').next().unwrap(), 16).unwrap();
    let mut s = Symbolizer::new(Path::new("/"));
    s.prepare(pid, &maps, Some((exe.dev(), exe.ino())));
    s.prepare(pid, b"", None);
    // Nor do maps read as a program execs (only the new stack mapped), whatever its executable.
    let mid_exec = b"7ffc1000-7ffc3000 rw-p 00000000 00:00 0 [stack]\n";
    s.prepare(pid, mid_exec, Some((exe.dev(), exe.ino() + 1)));
    let f = &s.user_frames(pid, &[start + 0x10])[0];
    assert!(
        f.module.as_deref().is_some_and(|m| m.ends_with("sleep")),
        "{f:?}"
    );
}

#[test]
fn a_process_that_does_not_exist_is_unresolved() {
    let mut s = Symbolizer::new(Path::new("/"));
    let frames = s.user_frames(0x7fff_fff0, &[0x1000, 0x2000]);
    assert_eq!(frames, vec![Frame::marker(UNRESOLVED_FRAME); 2]);
    let st = s.stats();
    assert_eq!((st.processes_gone, st.unresolved_frames), (1, 2), "{st:?}");
    s.forget(0x7fff_fff0);
}

/// A maps line for `m` at another path and inode.
fn maps_line(m: &maps::Mapping, path: &str, inode: u64) -> String {
    let (start, end, off) = (m.start, m.end, m.offset);
    format!("{start:x}-{end:x} r-xp {off:08x} 00:00 {inode}    {path}\n")
}

const PID: u32 = 4242;

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    fs::write(path, text).expect("write");
}

fn proc_dir(root: &Path) -> PathBuf {
    root.join(format!("proc/{PID}"))
}

/// A root whose `/usr/bin/app` is this test binary: the root, the binary's path and inode,
/// and its mapping of the test's own code.
fn app_root() -> (tempfile::TempDir, PathBuf, u64, maps::Mapping) {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = fs::canonicalize("/proc/self/exe").expect("own exe");
    let ino = fs::metadata(&exe).expect("stat exe").ino();
    fs::create_dir_all(dir.path().join("usr/bin")).expect("mkdir");
    symlink(&exe, dir.path().join("usr/bin/app")).expect("symlink");
    (dir, exe, ino, own_mapping(leaf_addr()))
}

#[test]
fn fake_root_resolves_the_binary_its_maps_name() {
    let (dir, _, ino, m) = app_root();
    let root = dir.path();
    write(
        &proc_dir(root).join("maps"),
        &maps_line(&m, "/usr/bin/app", ino),
    );
    let mut s = Symbolizer::new(root);
    // An address in no mapping on the first call does not read the maps a second time.
    let f = &s.user_frames(PID, &[leaf_addr(), 0x10])[0];
    assert_eq!(s.stats().maps_read, 1);
    assert!(
        f.function
            .as_deref()
            .unwrap_or_default()
            .contains("symbols_test_leaf_function")
    );
    assert_eq!(f.module.as_deref(), Some("/usr/bin/app"));
    assert_eq!(f.build_id, exe_build_id());
}

/// Processes of one program found through their own `map_files` share one parse of it, by the
/// root's path to the same file, which outlives each of them.
#[test]
fn processes_of_one_program_share_one_parse() {
    let (dir, exe, ino, m) = app_root();
    let root = dir.path();
    let pids = [PID, PID + 1];
    for pid in pids {
        let dir = root.join(format!("proc/{pid}"));
        write(&dir.join("maps"), &maps_line(&m, "/usr/bin/app", ino));
        fs::create_dir_all(dir.join("map_files")).expect("mkdir");
        symlink(
            &exe,
            dir.join(format!("map_files/{:x}-{:x}", m.start, m.end)),
        )
        .expect("symlink");
    }
    let mut s = Symbolizer::new(root);
    for pid in pids {
        let f = &s.user_frames(pid, &[leaf_addr()])[0];
        let name = f.function.as_deref().unwrap_or_default();
        assert!(name.contains("symbols_test_leaf_function"), "{f:?}");
    }
    let shared = root.join("usr/bin/app");
    assert_eq!(s.modules.keys().collect::<Vec<_>>(), [&shared]);
    s.forget(PID);
    assert!(s.modules.contains_key(&shared));
    // Where the root's path is another file, the process's own path is the one used.
    fs::remove_file(&shared).expect("rm");
    write(&shared, "another program");
    let mut s = Symbolizer::new(root);
    s.user_frames(PID, &[leaf_addr()]);
    let own = root.join(format!("proc/{PID}/map_files/{:x}-{:x}", m.start, m.end));
    assert_eq!(s.modules.get(&own).map(|(_, o)| *o), Some(Some(PID)));
}

#[test]
fn a_container_process_resolves_its_own_binary() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let exe = fs::canonicalize("/proc/self/exe").expect("own exe");
    let ino = fs::metadata(&exe).expect("stat exe").ino();
    // The host's /usr/bin/app is another file; the process's root holds the one it mapped.
    write(&root.join("usr/bin/app"), "not this one");
    let inner = proc_dir(root).join("root/usr/bin");
    fs::create_dir_all(&inner).expect("mkdir");
    symlink(&exe, inner.join("app")).expect("symlink");
    let m = own_mapping(leaf_addr());
    write(
        &proc_dir(root).join("maps"),
        &maps_line(&m, "/usr/bin/app", ino),
    );
    let mut s = Symbolizer::new(root);
    let f = &s.user_frames(PID, &[leaf_addr()])[0];
    assert!(
        f.function
            .as_deref()
            .unwrap_or_default()
            .contains("symbols_test_leaf_function")
    );
    assert_eq!(s.stats().binaries_replaced, 0);
}

#[test]
fn a_process_gone_after_its_maps_were_read_resolves_through_the_root() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let exe = fs::canonicalize("/proc/self/exe").expect("own exe");
    let ino = fs::metadata(&exe).expect("stat exe").ino();
    for bin in [root.join("usr/bin"), proc_dir(root).join("root/usr/bin")] {
        fs::create_dir_all(&bin).expect("mkdir");
        symlink(&exe, bin.join("app")).expect("symlink");
    }
    let m = own_mapping(leaf_addr());
    write(
        &proc_dir(root).join("maps"),
        &maps_line(&m, "/usr/bin/app", ino),
    );
    let mut s = Symbolizer::new(root);
    let name = |f: &Frame| f.function.clone().unwrap_or_default();
    assert!(name(&s.user_frames(PID, &[leaf_addr()])[0]).contains("symbols_test_leaf_function"));
    fs::remove_dir_all(proc_dir(root)).expect("the process ends");
    let f = &s.user_frames(PID, &[leaf_addr(), 0x10, 0x20])[0];
    assert!(name(f).contains("symbols_test_leaf_function"), "{f:?}");
    assert_eq!(s.stats().symbolize_errors, 0);
    // Addresses the last read placed nowhere do not make the maps be read again; a new one does.
    write(
        &proc_dir(root).join("maps"),
        &maps_line(&m, "/usr/bin/app", ino),
    );
    let before = s.stats().maps_read;
    s.user_frames(PID, &[leaf_addr(), 0x10, 0x20]);
    assert_eq!(s.stats().maps_read, before);
    s.user_frames(PID, &[leaf_addr(), 0x30]);
    assert_eq!(s.stats().maps_read, before + 1);
    s.user_frames(PID, &[leaf_addr(), 0x30, 0x20]);
    assert_eq!(s.stats().maps_read, before + 1);
    s.forget(PID);
    assert!(s.processes.is_empty() && s.modules.values().all(|(_, o)| *o != Some(PID)));
}

#[test]
fn a_replaced_binary_gives_module_and_offset() {
    let (dir, _, ino, m) = app_root();
    let root = dir.path();
    // The process mapped another inode than the file at the path now.
    write(
        &proc_dir(root).join("maps"),
        &maps_line(&m, "/usr/bin/app", ino + 1),
    );
    let mut s = Symbolizer::new(root);
    let f = &s.user_frames(PID, &[leaf_addr()])[0];
    assert_eq!(f.function, None);
    assert_eq!(f.label(), format!("app+{:#x}", m.file_offset(leaf_addr())));
    assert_eq!(s.stats().binaries_replaced, 1);
}

#[test]
fn a_stripped_binary_gives_module_and_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path();
    let bin = root.join("usr/bin/stripped");
    fs::create_dir_all(root.join("usr/bin")).expect("mkdir");
    if fs::copy("/bin/true", &bin).is_err() {
        eprintln!("skipped: no /bin/true to copy");
        return;
    }
    let stripped = std::process::Command::new("strip")
        .arg("--strip-all")
        .arg(&bin)
        .status();
    if !matches!(stripped, Ok(st) if st.success()) {
        eprintln!("skipped: strip is not available ({stripped:?})");
        return;
    }
    let ino = fs::metadata(&bin).expect("stat").ino();
    let line = format!("555500000000-555500010000 r-xp 00001000 00:00 {ino} /usr/bin/stripped\n");
    write(&proc_dir(root).join("maps"), &line);
    let mut s = Symbolizer::new(root);
    let f = &s.user_frames(PID, &[0x5555_0000_0123])[0];
    assert_eq!(f.function, None, "{f:?}");
    assert_eq!(f.offset, 0x1123);
    assert_eq!(f.label(), "stripped+0x1123");
    assert_eq!(f.build_id, super::elf::build_id(&bin));
}

/// A fake process with one anonymous executable mapping, and its perf map text.
fn jit_root(perf: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let maps = "7f0000000000-7f0000100000 rwxp 00000000 00:00 0 \n";
    write(&proc_dir(dir.path()).join("maps"), maps);
    let uid = unsafe { libc::getuid() };
    let status = format!("Name:\tjava\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{PID}\n");
    write(&proc_dir(dir.path()).join("status"), &status);
    write(&dir.path().join(format!("tmp/perf-{PID}.map")), perf);
    dir
}

#[test]
fn jit_frames_come_from_the_perf_map() {
    let perf = "7f0000001000 100 Interpreter\n\
                0x7f0000002000 0x80 LFoo;::bar with spaces\n\
                not a line\n\
                7f0000003000 zz bad_size\n\
                7f0000001000 40 LNew;::replaced_head\n";
    let dir = jit_root(perf);
    let mut s = Symbolizer::new(dir.path());
    let addrs = [
        0x7f00_0000_1010,
        0x7f00_0000_1050,
        0x7f00_0000_2010,
        0x7f00_0000_5000,
    ];
    let frames = s.user_frames(PID, &addrs);
    let names: Vec<_> = frames.iter().map(|f| f.function.as_deref()).collect();
    // A return address is looked up one byte earlier: 0x7f0000001050 - 1 is still past 0x1040.
    let want = [
        Some("LNew;::replaced_head"),
        Some("Interpreter"),
        Some("LFoo;::bar with spaces"),
        None,
    ];
    assert_eq!(names, want);
    assert_eq!(frames[0].kind, FrameKind::Jit);
    assert_eq!(frames[0].module.as_deref(), Some("/tmp/perf-4242.map"));
    assert_eq!(frames[3].label(), "0x7f0000005000");
    let st = s.stats();
    assert_eq!(
        (st.perf_maps_read, st.perf_map_lines_malformed),
        (1, 2),
        "{st:?}"
    );
    // The JIT appends an entry: an address not found makes the changed file be read again.
    let mut text = perf.to_string();
    text.push_str("7f0000005000 100 LLate;::compiled\n");
    write(&dir.path().join(format!("tmp/perf-{PID}.map")), &text);
    let f = &s.user_frames(PID, &[0x7f00_0000_5000])[0];
    assert_eq!(f.function.as_deref(), Some("LLate;::compiled"));
    assert_eq!(s.stats().perf_maps_read, 2);
}

#[test]
fn a_huge_perf_map_is_bounded() {
    let mut perf = String::new();
    for i in 0..5000u64 {
        perf.push_str(&format!("{:x} 10 f{i}\n", 0x7f00_0000_0000 + i * 0x10));
    }
    let dir = jit_root(&perf);
    let limits = Limits {
        max_perf_map_entries: 1000,
        ..Limits::default()
    };
    let mut s = Symbolizer::with_limits(dir.path(), limits);
    let frames = s.user_frames(PID, &[0x7f00_0000_0005]);
    assert_eq!(frames[0].function.as_deref(), Some("f0"));
    let frames = s.user_frames(PID, &[0x7f00_0000_0000 + 4000 * 0x10]);
    assert_eq!(frames[0].function, None);
    assert!(s.stats().perf_maps_truncated >= 1);
    // The byte cap cuts a line short: that line is not taken.
    let caps = PerfMapCaps {
        max_bytes: 30,
        max_entries: 10,
    };
    let map = PerfMap::parse(perf.as_bytes().take_bytes(30), caps).expect("parse");
    assert!(map.truncated);
    assert_eq!(map.find(0x7f00_0000_0000), Some("f0"));
    assert_eq!(map.find(0x7f00_0000_0010), None);
}

/// The first `n` bytes of a byte slice, as a reader.
trait TakeBytes {
    fn take_bytes(&self, n: usize) -> &[u8];
}

impl TakeBytes for [u8] {
    fn take_bytes(&self, n: usize) -> &[u8] {
        &self[..n.min(self.len())]
    }
}

#[test]
fn a_perf_map_that_is_not_a_regular_file_is_refused() {
    let dir = jit_root("");
    let path = dir.path().join(format!("tmp/perf-{PID}.map"));
    fs::remove_file(&path).expect("rm");
    symlink("/dev/zero", &path).expect("symlink");
    let mut s = Symbolizer::new(dir.path());
    let f = &s.user_frames(PID, &[0x7f00_0000_1000])[0];
    assert_eq!(f.function, None);
    assert_eq!(s.stats().perf_maps_refused, 1);
}

#[test]
fn a_container_perf_map_is_named_by_the_pid_inside() {
    let dir = jit_root("");
    let uid = unsafe { libc::getuid() };
    let status = format!("Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nNSpid:\t{PID}\t7\n");
    write(&proc_dir(dir.path()).join("status"), &status);
    write(
        &proc_dir(dir.path()).join("root/tmp/perf-7.map"),
        "7f0000001000 100 inside\n",
    );
    let mut s = Symbolizer::new(dir.path());
    let f = &s.user_frames(PID, &[0x7f00_0000_1000])[0];
    assert_eq!(f.function.as_deref(), Some("inside"));
    assert_eq!(f.module.as_deref(), Some("/tmp/perf-7.map"));
}

#[test]
fn a_perf_map_another_user_wrote_is_refused() {
    let dir = jit_root("7f0000001000 100 forged\n");
    let path = dir.path().join(format!("tmp/perf-{PID}.map"));
    // Root's perf maps are trusted: as root, give the file to another user.
    if unsafe { libc::getuid() } == 0 {
        std::os::unix::fs::chown(&path, Some(4321), None).expect("chown");
    }
    let owner = fs::metadata(&path).expect("stat").uid();
    let other = owner + 1;
    let status = format!("Uid:\t{other}\t{other}\t{other}\t{other}\n");
    write(&proc_dir(dir.path()).join("status"), &status);
    let mut s = Symbolizer::new(dir.path());
    let f = &s.user_frames(PID, &[0x7f00_0000_1000])[0];
    assert_eq!(f.function, None);
    assert_eq!(s.stats().perf_maps_refused, 1);
}

#[test]
fn maps_are_bounded_and_only_code_is_kept() {
    let mut text = String::from("1000-2000 r--p 00000000 08:01 5 /bin/x\n");
    text.push_str("2000-3000 r-xp 00001000 08:01 5 /bin/x (deleted)\n");
    text.push_str("3000-4000 r-xp 00000000 00:00 0 [vdso]\n");
    text.push_str("garbage\n");
    for i in 0..100u64 {
        text.push_str(&format!(
            "{:x}-{:x} r-xp 0 00:00 0\n",
            0x10000 + i * 0x1000,
            0x11000 + i * 0x1000
        ));
    }
    let maps = Maps::parse(text.as_bytes(), 1 << 20, 50).expect("parse");
    assert!(maps.truncated);
    assert_eq!(maps.find(0x1500), None);
    let i = maps.find(0x2500).expect("code mapping");
    let m = &maps.mappings[i];
    assert_eq!(m.file_offset(0x2500), 0x1500);
    assert_eq!(m.module_name().as_deref(), Some("/bin/x"));
    assert!(matches!(
        m.backing,
        maps::Backing::File { deleted: true, .. }
    ));
    let v = maps.find(0x3001).expect("vdso");
    assert_eq!(maps.mappings[v].module_name().as_deref(), Some("[vdso]"));
    let whole = Maps::parse(text.as_bytes(), 1 << 20, 1000).expect("parse");
    assert!(!whole.truncated);
    assert_eq!(whole.mappings.len(), 102);
    // The byte cap cuts the second line short: it is not taken.
    let cut = Maps::parse(text.as_bytes().take_bytes(60), 60, 1000).expect("parse");
    assert!(cut.truncated);
    assert!(cut.mappings.is_empty());
}

/// Only a file's code makes maps a running program's: the stack and special areas alone (mid-
/// exec), data of a file, or nothing (exit) do not.
#[test]
fn maps_are_a_program_s_once_they_map_a_file_s_code() {
    let stack = "7ffc1000-7ffc3000 rw-p 00000000 00:00 0 [stack]\n";
    let vdso = "7ffc4000-7ffc5000 r-xp 00000000 00:00 0 [vdso]\n";
    let data = "1000-2000 r--p 00000000 08:01 5 /bin/x\n";
    let code = "2000-3000 r-xp 00001000 08:01 5 /bin/x";
    for (text, want) in [
        (String::new(), false),
        (format!("{stack}{vdso}"), false),
        (format!("{data}{stack}"), false),
        (format!("{data}{code}\n{stack}"), true),
        // The last line need not end in a newline.
        (format!("{stack}{code}"), true),
        (
            format!("{vdso}{}", code.replace("/bin/x", "/bin/x (deleted)")),
            true,
        ),
    ] {
        assert_eq!(maps::maps_file_code(text.as_bytes()), want, "{text:?}");
    }
}

/// A mapping the kernel answered later takes the place of the ones it overlaps (they were
/// unmapped since), keeps the order, and is named as its maps line would name it.
#[test]
fn a_mapping_found_later_replaces_those_it_overlaps() {
    let text = "1000-2000 r-xp 0 08:01 5 /bin/a\n3000-4000 r-xp 0 08:01 6 /bin/b\n";
    let mut maps = Maps::parse(text.as_bytes(), 1 << 20, 10).expect("parse");
    let found = crate::sys::procmap::Vma {
        start: 0x1800,
        end: 0x2800,
        offset: 0x1000,
        inode: 7,
        name: b"/bin/c (deleted)".to_vec(),
    };
    assert_eq!(maps.insert(found.into()), vec![(0x1000, 0x2000, 0, 5)]);
    let starts: Vec<u64> = maps.mappings.iter().map(|m| m.start).collect();
    assert_eq!(starts, [0x1800, 0x3000]);
    let c = &maps.mappings[maps.find(0x2000).expect("the new mapping")];
    assert_eq!(c.file_offset(0x2000), 0x1800);
    assert!(
        matches!(&c.backing, maps::Backing::File { path, deleted: true } if path == Path::new("/bin/c"))
    );
    let anon = crate::sys::procmap::Vma {
        start: 0x5000,
        end: 0x6000,
        offset: 0,
        inode: 0,
        name: Vec::new(),
    };
    assert!(maps.insert(anon.into()).is_empty());
    assert_eq!(maps.mappings[2].backing, maps::Backing::Anon);
}

#[test]
fn processes_cached_are_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    for pid in 1..=3u32 {
        let maps = "1000-2000 r-xp 00000000 00:00 0 \n";
        write(&dir.path().join(format!("proc/{pid}/maps")), maps);
    }
    let limits = Limits {
        max_processes: 2,
        ..Limits::default()
    };
    let mut s = Symbolizer::with_limits(dir.path(), limits);
    for pid in 1..=3u32 {
        s.user_frames(pid, &[0x1000]);
    }
    assert_eq!(s.stats().processes_evicted, 1);
    assert_eq!(s.processes.len(), 2);
    s.forget(3);
    assert_eq!(s.processes.len(), 1);
}

const KALLSYMS: &str = "\
ffffffff81000000 T _text
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81003000 T copy_user_generic
ffffffffc0001000 t nvme_irq\t[nvme]
ffffffffc0002000 t nvme_poll\t[nvme]
";

#[test]
fn kernel_frames_from_kallsyms() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(&dir.path().join("proc/kallsyms"), KALLSYMS);
    let mut s = Symbolizer::new(dir.path());
    // Leaf exact; the rest are return addresses (one byte earlier).
    let addrs = [
        0xffff_ffff_8100_2010,
        0xffff_ffff_c000_2000,
        0xffff_ffff_8000_0000,
    ];
    let frames = s.kernel_frames(&addrs);
    let names: Vec<_> = frames.iter().map(|f| f.function.as_deref()).collect();
    assert_eq!(names, [Some("do_one_initcall"), Some("nvme_irq"), None]);
    assert_eq!(frames[0].module.as_deref(), Some("[kernel.kallsyms]"));
    assert_eq!(frames[1].module.as_deref(), Some("[nvme]"));
    assert_eq!(frames[0].kind, FrameKind::Kernel);
    assert_eq!(frames[0].offset, addrs[0]);
    let st = s.stats();
    assert!(
        !st.kernel_symbols_hidden && !st.kernel_symbols_unavailable,
        "{st:?}"
    );
    assert_eq!((st.kernel_addresses, st.kernel_resolved), (3, 2));
    // Far past the last symbol is no symbol.
    let far = s.kernel_frames(&[0xffff_ffff_c100_0000]);
    assert_eq!(far[0].function, None);
}

#[test]
fn hidden_kernel_addresses_give_bare_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let hidden = KALLSYMS
        .lines()
        .map(|l| format!("0000000000000000{}\n", &l[16..]))
        .collect::<String>();
    write(&dir.path().join("proc/kallsyms"), &hidden);
    let mut s = Symbolizer::new(dir.path());
    let frames = s.kernel_frames(&[0xffff_ffff_8100_1010]);
    assert_eq!(frames[0].function, None);
    assert_eq!(frames[0].label(), "0xffffffff81001010");
    let st = s.stats();
    assert!(
        st.kernel_symbols_hidden && st.kernel_symbols_unavailable,
        "{st:?}"
    );
}

#[test]
fn no_kallsyms_gives_bare_frames() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Symbolizer::new(dir.path());
    let frames = s.kernel_frames(&[0xffff_ffff_8100_1010]);
    assert_eq!(frames[0].function, None);
    assert!(s.stats().kernel_symbols_unavailable);
}
