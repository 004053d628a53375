"""The inside of a sandboxed test run: it jails itself, then runs a program or judges one.

sandbox/__init__.py starts `python -I -S -B -c BOOT` and writes, marshalled, this module's code and a
header (what to run, with which limits and pipes) on its stdin. Standard library only:
neither dlmcode nor its environment is importable in there. A test run is two such
processes, joined only by two pipes:

- the sample runs the program (prompt + middle + suffix, without the test) and answers
  calls to its top-level names; it never sees the test and holds no channel to the bench;
- the judge runs the test and calls `check(candidate)`, where `candidate` (and any name
  the test takes from the program, e.g. HumanEval/38's encode_cyclic) is a proxy: it sends
  the arguments and gets back plain data, rebuilt by `decode` as exact builtin types. The
  judge reports "passed" on its own report pipe, which only it and the bench hold, and only
  when check() returned. Nothing the sample does can make that message appear: an object
  with an always-true __eq__, exit(), os._exit(0) or a forged message all end in "failed".

The jail (`jail`), Linux namespaces through ctypes: new user, mount, network, PID, IPC, UTS
and cgroup namespaces (as root, the user namespace maps only nobody, 65534, and we become
nobody once the root is built); a new root on a tmpfs holding read-only binds of the system
folders and the Python installation, /dev/null and friends, and a size-capped tmpfs at /tmp
(the only writable place, also the working folder); pivot_root, the old root detached; a
PID namespace whose init (a small reaper, never the program) takes every process with it
when it exits; then, in the worker, resource limits, no capabilities, no_new_privs, and
finally the audit hook (a second layer).

Reports, framed messages in the wire format below, go from the trusted parts of each process
to the bench: {"ready": True} once jailed, the judge's {"verdict": ...}, the reaper's
{"end": ...} with the worker's exit, or {"error": ...} when the jail could not be built.
"""

import _signal as signal  # not `signal`: it imports enum, a tenth of a start
import os
import resource
import sys

NOBODY = 65534  # the unprivileged user a root bench's tests run as
MAX_MESSAGE = 16 << 20  # bytes in one message between judge and sample
DETAIL = 400  # characters of an error kept in a verdict
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # bound read-only when present
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")

# ---------------------------------------------------------------- plain data on the wire
# A tag byte, then for scalars a 4-byte length and the bytes, for containers a 4-byte count and
# the items. No json (it imports re, which costs more than the rest of a start) and never
# pickle or marshal, which are not safe on data from the sample.

SCALARS = {type(None): b"N", bool: b"B", int: b"i", float: b"f", complex: b"c", str: b"s", bytes: b"b"}
CONTAINERS = {list: b"l", tuple: b"t", set: b"S", frozenset: b"z", dict: b"d"}
MAX_DEPTH = 100


class WireError(Exception):
    """A message that is not plain data in dlmcode's encoding."""


def encode(value):
    """Exact builtin values as bytes; anything else (subclasses too) is refused with WireError."""
    out = []
    _encode(value, out, 0)
    return b"".join(out)


def _encode(value, out, depth):
    kind = type(value)
    if depth > MAX_DEPTH:
        raise WireError("nested too deeply")
    if kind in SCALARS:
        body = _scalar(value, kind)
        out += (SCALARS[kind], len(body).to_bytes(4, "big"), body)
    elif kind in CONTAINERS:
        out += (CONTAINERS[kind], len(value).to_bytes(4, "big"))
        for item in (x for pair in value.items() for x in pair) if kind is dict else value:
            _encode(item, out, depth + 1)
    else:
        raise WireError(f"a {kind.__name__} is not plain data")


def _scalar(value, kind):
    if kind is int:
        return value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True)
    if kind is float:
        return value.hex().encode()
    if kind is complex:
        return f"{value.real.hex()} {value.imag.hex()}".encode()
    if kind is str:
        return value.encode("utf-8", "surrogatepass")
    if kind is bool:
        return b"1" if value else b"0"
    return b"" if value is None else value


def decode(data):
    """The inverse of `encode`, strict: only exact builtin types come out, or WireError."""
    try:
        value, end = _decode(data, 0, 0)
    except WireError:
        raise
    except (ValueError, TypeError, IndexError, OverflowError, RecursionError, MemoryError) as err:
        raise WireError(f"not plain data ({type(err).__name__})") from None
    if end != len(data):
        raise WireError("trailing bytes")
    return value


def _decode(data, at, depth):
    if depth > MAX_DEPTH:
        raise WireError("nested too deeply")
    tag, size = data[at : at + 1], int.from_bytes(data[at + 1 : at + 5], "big")
    at += 5
    if at > len(data):
        raise WireError("cut short")
    if tag in SCALAR_OF:
        if at + size > len(data):
            raise WireError("cut short")
        return SCALAR_OF[tag](data[at : at + size]), at + size
    if tag not in CONTAINER_OF or size > len(data) - at:  # every item takes at least a byte
        raise WireError(f"unknown tag {tag!r}")
    items = []
    for _ in range(size * 2 if tag == b"d" else size):
        item, at = _decode(data, at, depth + 1)
        items.append(item)
    return CONTAINER_OF[tag](items), at


def _none(body):
    if body:
        raise WireError("malformed None")


def _bool(body):
    if body not in (b"0", b"1"):
        raise WireError("malformed bool")
    return body == b"1"


def _complex(body):
    real, imag = body.decode("ascii").split(" ")
    return complex(float.fromhex(real), float.fromhex(imag))


SCALAR_OF = {
    b"N": _none,
    b"B": _bool,
    b"i": lambda b: int.from_bytes(b, "big", signed=True),
    b"f": lambda b: float.fromhex(b.decode("ascii")),
    b"c": _complex,
    b"s": lambda b: b.decode("utf-8", "surrogatepass"),
    b"b": bytes,
}
CONTAINER_OF = {
    b"l": list,
    b"t": tuple,
    b"S": set,
    b"z": frozenset,
    b"d": lambda items: dict(zip(items[::2], items[1::2], strict=False)),
}


def send(fd, message):
    """One framed message (4-byte length, then `encode(message)`)."""
    data = encode(message)
    if len(data) > MAX_MESSAGE:
        raise WireError(f"a message of {len(data)} bytes (at most {MAX_MESSAGE})")
    view = memoryview(len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(fd, view) :]


def receive(fd):
    """The next message, or None at end of file; WireError for garbage."""
    head = _read_exactly(fd, 4)
    if head is None:
        return None
    size = int.from_bytes(head, "big")
    if size > MAX_MESSAGE:
        raise WireError(f"a message of {size} bytes (at most {MAX_MESSAGE})")
    body = _read_exactly(fd, size)
    if body is None or len(body) < size:
        raise WireError("cut short")
    return decode(body)


def _read_exactly(fd, n):
    parts, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None if left == n else b""
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def frames(data):
    """The messages in `data` (a report pipe's bytes); a cut or malformed tail is dropped."""
    found, at = [], 0
    while at + 4 <= len(data):
        size = int.from_bytes(data[at : at + 4], "big")
        if at + 4 + size > len(data):
            break
        try:
            found.append(decode(data[at + 4 : at + 4 + size]))
        except WireError:
            break
        at += 4 + size
    return found


def report(fd, **line):
    send(fd, line)


# ---------------------------------------------------------------- the sample: run the program, answer calls


def sample(header, fds):
    """Run the program; then answer the judge's requests until it hangs up, and leave at once."""
    calls, answers = fds["calls"], fds["answers"]
    program = header["code"]
    try:
        with open("program.py", "w", encoding="utf-8") as handle:  # for tracebacks' source lines
            handle.write(program)
    except OSError:
        pass
    import builtins

    builtins.exit = builtins.quit = sys.exit  # what site.py adds (we start without it, -S)
    module = type(sys)("__main__")
    module.__file__ = "program.py"
    sys.modules["__main__"] = module
    sys.argv = ["program.py"]
    failure = None
    try:
        exec(compile(program, "program.py", "exec"), module.__dict__)
    except BaseException as err:  # SystemExit too: a program that leaves early has nothing to answer with
        failure = _describe(err)
        _print_exception(err)
    while True:
        try:
            request = receive(calls)
        except (WireError, OSError):
            request = None
        if request is None:
            _leave(0)  # no atexit handlers, no thread joins: the judge has what it needs
        try:
            send(
                answers, ["raised", "the program failed: " + failure] if failure else _answer(module.__dict__, request)
            )
        except (WireError, OSError):
            _leave(1)


def _leave(code):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _answer(names, request):
    try:
        if request[0] == "names":
            return ["ok", {name: _kind(names[name]) for name in request[1] if name in names}]
        _, name, args, kwargs = request
        result = names[name](*args, **kwargs)
        encode(result)  # plain data, or WireError (raised here, answered as "raised")
        return ["ok", result]
    except BaseException as err:
        return ["raised", _describe(err)]


def _kind(value):
    if type(value) is type(sys):
        return ["module", str(value.__name__)]
    if callable(value):
        return ["callable"]
    encode(value)
    return ["value", value]


def _describe(err):
    try:
        return f"{type(err).__name__}: {err}"[:DETAIL]
    except BaseException:
        return type(err).__name__[:DETAIL]


def _print_exception(err):
    try:
        import traceback

        traceback.print_exception(err)
    except BaseException:
        pass


# ---------------------------------------------------------------- the judge: run check() with proxies


class SampleError(Exception):
    """The sample raised, could not answer, or answered with something that is not plain data."""


def judge(header, fds):
    """Run the test with proxies for the program's names; report passed only when check() returned."""
    verdict = fds["report"]
    try:
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        namespace.update(_bindings(fds, header["names"]))
        exec(compile(header["code"], "test.py", "exec"), namespace)
        check, candidate = namespace["check"], namespace.get(header["entry"], _missing(header["entry"]))
        check(candidate)
    except BaseException as err:
        report(verdict, verdict="failed", detail=_describe(err))
        os._exit(1)
    report(verdict, verdict="passed")
    os._exit(0)


def _bindings(fds, names):
    """The program's names the test uses: proxies for callables, copies of plain values, stdlib modules."""
    kinds = _call(fds, ["names", names])
    if type(kinds) is not dict:
        raise SampleError("the sample answered 'names' with something else")
    found = {}
    for name, kind in kinds.items():
        if name not in names or type(kind) is not list or not kind:
            raise SampleError("the sample answered 'names' with something else")
        if kind[0] == "callable":
            found[name] = _proxy(fds, name)
        elif kind[0] == "value" and len(kind) == 2:
            found[name] = kind[1]
        elif kind == ["module", name] and name in sys.stdlib_module_names:  # `import math`: our own math
            found[name] = __import__(name)
    return found


def _proxy(fds, name):
    def proxy(*args, **kwargs):
        return _call(fds, ["call", name, list(args), kwargs])

    proxy.__name__ = proxy.__qualname__ = name
    return proxy


def _missing(name):
    def missing(*args, **kwargs):
        raise SampleError(f"the program does not define {name}")

    return missing


def _call(fds, request):
    """One request to the sample and its answer's payload; SampleError for anything else."""
    try:
        send(fds["calls"], request)
        answer = receive(fds["answers"])
    except (WireError, OSError) as err:
        raise SampleError(f"the sample could not be reached: {err}") from None
    if answer is None:
        raise SampleError("the sample ended before answering")
    if type(answer) is not list or len(answer) != 2 or answer[0] not in ("ok", "raised"):
        raise SampleError("the sample answered with something else")
    if answer[0] == "raised":
        raise SampleError(f"the sample raised {str(answer[1])[:DETAIL]}")
    return answer[1]


def probe(header, fds):
    """Jailed and working: not root, no network, a read-only root, a writable /tmp."""
    problems = []
    if header.get("jail"):
        if os.getuid() == 0 or os.geteuid() == 0:
            problems.append("still root")
        try:
            open("/probe", "w").close()
            problems.append("/ is writable")
        except OSError:
            pass
        try:
            import socket

            socket.create_connection(("127.0.0.1", 9), timeout=1).close()
            problems.append("the network is reachable")
        except OSError as err:
            if "unreachable" not in str(err).lower():
                problems.append(f"the network answered: {err}")
    open("probe.txt", "w").close()
    report(fds["report"], verdict="failed" if problems else "passed", detail="; ".join(problems))
    os._exit(0)


ROLES = {"sample": sample, "judge": judge, "probe": probe}

# ---------------------------------------------------------------- the audit hook (second layer)

DENIED = (
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "pty.spawn",
    "socket.",
    "ctypes.",
    "os.kill",
    "os.killpg",
    "signal.pthread_kill",
    "os.chdir",
    "os.fchdir",
    "os.chroot",
    "os.symlink",
    "os.link",
    "os.chmod",
    "os.chown",
    "shutil.",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys.settrace",
    "sys.setprofile",
    "sys._current_frames",
    "resource.setrlimit",
    "resource.prlimit",
)
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def audit_hook(reads, writes):
    """A PEP 578 hook refusing what the jail already stops: an obstacle, not the boundary.

    Everything it calls is bound here, in its closure: no module global or builtin that a
    program can rebind changes what it does; str, bytes and int subclasses are read through
    the base type's methods, so their overrides never run here. The events that would reach
    the hook itself (gc, other threads' frames, tracing) are refused.
    """
    denied, write_flags, writers, error = DENIED, WRITE_FLAGS, frozenset("wax+"), PermissionError
    str_, bytes_, int_, isinstance_, len_, fspath, stat = str, bytes, int, isinstance, len, os.fspath, os.stat
    startswith, split, rstrip, as_str, decode, and_ = (
        str.startswith,
        str.split,
        str.rstrip,
        str.__str__,
        bytes.decode,
        int.__and__,
    )
    errors = (OSError, ValueError, TypeError)
    changes = frozenset({"os.remove", "os.rmdir", "os.rename", "os.mkdir", "os.truncate", "os.utime"})
    looks = frozenset({"os.listdir", "os.scandir"})
    cwd = os.getcwd()

    def text(path):
        if not isinstance_(path, (str_, bytes_)):
            path = fspath(path)  # a path-like object's own answer: the jail, not this, is the boundary
        return decode(path, "utf-8", "surrogateescape") if isinstance_(path, bytes_) else as_str(path)

    def absolute(path):
        path = text(path)
        parts = []
        for part in split(path if startswith(path, "/") else cwd + "/" + path, "/"):
            if part == "..":
                parts = parts[:-1]
            elif part and part != ".":
                parts.append(part)
        return "/" + "/".join(parts)

    def inside(path, roots):
        for root in roots:
            if path == root or startswith(path, rstrip(root, "/") + "/"):
                return True
        return False

    def is_folder(path):
        try:
            return and_(stat(path).st_mode, 0o170000) == 0o040000
        except errors:
            return False

    def writing(event, args):
        if event in changes:
            return True
        mode = args[1] if len_(args) > 1 and isinstance_(args[1], str_) else ""
        flags = args[2] if len_(args) > 2 and isinstance_(args[2], int_) else 0
        return any_of(as_str(mode), writers) or and_(flags, write_flags) != 0

    def any_of(chars, wanted):
        for char in chars:
            if char in wanted:
                return True
        return False

    def hook(event, args):
        if startswith(event, denied):
            raise error(f"sandbox: {event} is not allowed")
        if (event != "open" and event not in changes and event not in looks) or not args or isinstance_(args[0], int_):
            return
        path = absolute(args[0])
        if not inside(path, writes if writing(event, args) else reads):
            raise error(f"sandbox: {event} {path!r} is outside the sandbox")
        if (
            event == "os.rename"
            and len_(args) > 1
            and not isinstance_(args[1], int_)
            and not inside(absolute(args[1]), writes)
        ):
            raise error(f"sandbox: {event} to {absolute(args[1])!r} is outside the sandbox")
        if event == "open" and not inside(path, writes) and is_folder(path):
            raise error(f"sandbox: opening the folder {path!r} (a dir_fd outside) is not allowed")

    return hook


# ---------------------------------------------------------------- the jail (Linux namespaces through ctypes)

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x2000000, 0x4000000, 0x8000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_NOATIME, MS_NODIRATIME = 1, 2, 4, 8, 32, 1024, 2048
MS_BIND, MS_REC, MS_PRIVATE, MS_RELATIME, MNT_DETACH = 4096, 16384, 1 << 18, 1 << 21, 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}  # syscall numbers; glibc has no wrapper
# statvfs flags that a bind mount inherits and a user namespace may not clear (locked): kept on remount
LOCKED = (
    {
        os.ST_NOSUID: MS_NOSUID,
        os.ST_NODEV: MS_NODEV,
        os.ST_NOEXEC: MS_NOEXEC,
        os.ST_NOATIME: MS_NOATIME,
        os.ST_NODIRATIME: MS_NODIRATIME,
        os.ST_RELATIME: MS_RELATIME,
    }
    if hasattr(os, "ST_NOSUID")
    else {}
)


class JailError(Exception):
    """A step of building the jail failed; nothing untrusted has run."""


def _libc():
    import ctypes  # here, not at the top: an unisolated run does without it (a third of a bare start)

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.unshare.argtypes = [ctypes.c_int]
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.capset.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return libc


def _check(step, result):
    if result < 0:
        import ctypes

        errno = ctypes.get_errno()
        raise JailError(f"{step}: {os.strerror(errno)}")
    return result


def _bytes(path):
    return None if path is None else os.fsencode(path)


def _mount(libc, source, target, fstype, flags, data=None):
    step = f"mount {fstype or source or ''} on {target}"
    _check(step, libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(data)))


def jail(header):
    """Build the jail around this process; returns in the worker (pid 2 of a new PID namespace).

    As root, the new user namespace maps only nobody, written by a helper still root outside
    it; we keep root's access to the files we bind until the root is built, then become nobody.
    The namespace's init (the reaper) and this process stay behind to report how the worker
    ended; see `_reap`.
    """
    libc, spec = _libc(), header["jail"]
    helper = _map_helper(spec) if os.geteuid() == 0 else None
    _check(
        "unshare",
        libc.unshare(
            CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
        ),
    )
    if helper:
        _await_helper(*helper)
    else:
        _map_ids()
    _no_more_namespaces()
    _check("making our mounts private", libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None))
    sources = {
        path: os.open(path, os.O_PATH) for path in _binds(spec)
    }  # here: in our mount namespace, still able to read them
    if helper:
        _become(spec)
    _new_root(libc, sources, spec)
    return _fork_init(libc, header)


def _no_more_namespaces():
    """No user namespace can be made inside ours (as bubblewrap's --disable-userns): the worker
    cannot give itself a fresh set of capabilities, even over namespaces of its own."""
    try:
        with open("/proc/sys/user/max_user_namespaces", "w") as handle:
            handle.write("0")
    except OSError as err:
        raise JailError(f"limiting user namespaces: {err.strerror}") from None


def _binds(spec):
    paths = [p for p in (*SYSTEM, *spec["python"]) if os.path.lexists(p)]
    return [*dict.fromkeys(paths), *[d for d in DEVICES if os.path.exists(d)]]


def _map_helper(spec):
    """A child, root outside our coming user namespace, that maps nobody in it once we have made it."""
    go_r, go_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        os.close(go_r)
        return pid, go_w
    os.close(go_w)
    if os.read(go_r, 1) != b"1":
        os._exit(1)  # the parent is gone
    try:
        for name, n in (("uid_map", spec["uid"]), ("gid_map", spec["gid"])):
            with open(f"/proc/{parent}/{name}", "w") as handle:
                handle.write(f"{n} {n} 1")
    except OSError:
        os._exit(1)
    os._exit(0)


def _await_helper(pid, go_w):
    os.write(go_w, b"1")
    os.close(go_w)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise JailError("mapping nobody into the user namespace failed")


def _become(spec):
    """Root so far (to open what we bind); now nobody, the only user the namespace maps."""
    os.setgroups([])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    _libc().prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # the uid change made /proc/self root's; we bind through it


def _map_ids():
    """Not root: map our own ids (the same numbers inside, so `id` says who we are outside)."""
    uid, gid = os.geteuid(), os.getegid()
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        try:
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(text)
        except OSError as err:
            raise JailError(f"writing /proc/self/{name}: {err.strerror}") from None


def _new_root(libc, sources, spec):
    """A tmpfs root with read-only binds of `sources` (path: fd) at their paths and a writable /tmp; pivot into it."""
    root = "/tmp"  # any folder will do as a mount point; bubblewrap uses /tmp too
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    for path, fd in sources.items():
        _bind(libc, path, fd, root + path)
    _hide(libc, root, spec.get("hide", ()))
    for name in ("tmp", "oldroot"):
        os.makedirs(f"{root}/{name}", exist_ok=True)
    _mount(libc, "tmpfs", f"{root}/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={spec['scratch_mb']}m,mode=0700")
    os.chdir(root)
    _check("pivot_root", libc.syscall(PIVOT_ROOT[os.uname().machine], b".", b"oldroot"))
    os.chdir("/")
    _check("detaching the old root", libc.umount2(b"/oldroot", MNT_DETACH))
    os.rmdir("/oldroot")
    _mount(libc, None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/tmp")


def _hide(libc, root, folders):
    """An empty read-only tmpfs over each of `folders` (the installation's site-packages): what is
    bound is readable, and -I -S alone does not stop a program putting a readable folder on sys.path."""
    for folder in folders:
        target = root + folder
        if os.path.isdir(target) and not os.path.islink(target):
            _mount(libc, "tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=0555")


def _bind(libc, path, fd, target):
    """`path` (opened as `fd`) at `target`, read-only; a symbolic link is copied as a link."""
    source = f"/proc/self/fd/{fd}"
    if path in SYSTEM and os.path.islink(path):
        os.makedirs(os.path.dirname(target), exist_ok=True)
        os.symlink(os.readlink(path), target)
        os.close(fd)
        return
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    _mount(libc, source, target, None, MS_BIND | MS_REC)
    locked = sum(flag for st, flag in LOCKED.items() if os.statvfs(source).f_flag & st)
    _mount(libc, None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | locked)
    os.close(fd)


def _fork_init(libc, header):
    """Fork the namespace's init (the reaper) and, from it, the worker; return in the worker."""
    libc.prctl(
        PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0
    )  # the bench killed: so are we (set after our last uid change, which clears it)
    if os.getppid() != header["bench"]:
        os._exit(1)  # it died before that
    alive_r, alive_w = os.pipe()  # the reaper's read end sees end of file once we are gone
    init = os.fork()
    if init:
        os.close(alive_r)
        _close_role_fds(header, keep=())
        _, status = os.waitpid(init, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.close(alive_w)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # our parent killed on the timeout: so are we
    os.set_blocking(alive_r, False)
    try:
        if os.read(alive_r, 1) == b"":
            os._exit(1)  # the parent died before prctl: nobody is left to wait for us
    except BlockingIOError:
        pass
    os.setsid()  # a session of our own: kill(0) and killpg(0) from inside reach only this namespace
    return _fork_worker(header, init=True)


def _fork_worker(header, init):
    """Fork the worker and stay behind to reap, then report how it ended; return in the worker."""
    worker = os.fork()
    if worker == 0:
        return
    if init:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)  # init ignores signals without a handler: the sample cannot stop us
        _libc().prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # nor trace us
    _close_role_fds(header, keep=("report",))
    _reap(header, worker)


def _reap(header, worker):
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == worker:
            break
    code = os.waitstatus_to_exitcode(status)
    report(header["fds"]["report"], end="signal" if code < 0 else "exit", code=abs(code))
    os._exit(0)  # as init: the kernel now kills every process left in the namespace


def _close_role_fds(header, keep):
    for name, fd in header["fds"].items():
        if name not in keep:
            os.close(fd)


# ---------------------------------------------------------------- the worker: limits, no privileges, go


def limit(limits, jailed):
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory"], limits["memory"]))
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu"], limits["cpu"] + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["fsize"], limits["fsize"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if jailed:  # counted in our own user namespace; outside one it would count all of the user's processes
        resource.setrlimit(resource.RLIMIT_NPROC, (limits["nproc"], limits["nproc"]))


def drop_privileges():
    """No capabilities now or after any exec, and no way to gain them (no_new_privs)."""
    libc = _libc()
    cap = 0
    while libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    import ctypes

    head = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: all empty (two 32-bit words)
    _check("capset", libc.capset(ctypes.addressof(head), ctypes.addressof(data)))
    _check("no_new_privs", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))


def _start(header):
    """The worker's last trusted steps: limits, privileges, stdin, the hook. Returns its role."""
    fds, jailed = header["fds"], bool(header.get("jail"))
    limit(header["limits"], jailed)
    if jailed:
        drop_privileges()
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    report(fds["report"], ready=True)
    if header["role"] == "sample":
        os.close(fds.pop("report"))  # the sample holds no channel to the bench
    if header.get("audit"):
        here = os.getcwd()
        reads = ("/",) if jailed else (here, *header["python"])
        sys.addaudithook(audit_hook(reads, (here,)))
    return ROLES[header["role"]]


def main(header):
    """Jail (or, unsafe, only fork), then run the role; `header` comes from sandbox/__init__.py (see BOOT there)."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # out of memory, the kernel kills our processes first, not the bench
    except OSError:
        pass
    try:
        if header.get("jail"):
            jail(header)
        else:
            _fork_worker(header, init=False)
        role = _start(header)
    except (JailError, OSError, KeyError, ValueError) as err:
        report(header["fds"]["report"], error=str(err))
        os._exit(125)
    role(header, header["fds"])
