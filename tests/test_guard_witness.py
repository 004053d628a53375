"""The guard's first witness for the cuts where it used to give up (issue 26's held-out suites and attack classes):
before the first model call, fillers give every hole a filling that the judge passes and that leaves the user's
code after the hole as it is (no comment escape). Each case is a cut from a real file of the held-out suites or
the attack classes (standard library, Linux headers, node-gyp), shortened; without a first witness the decode runs
unguarded until some call's draft passes, and gives up when none does."""

from __future__ import annotations

import dataclasses

import pytest

from dlmcode import models
from dlmcode.jobs import fill, wiring
from dlmcode.text import spans, syntax


@pytest.fixture(scope="module")
def shipped():
    return models.load()


def witness_text(dlm, prompt: str, canonical: str, suffix: str, lang: str) -> str | None:
    """The file with the first witness in the hole (the hole as long as the user's text there), or None."""
    n = max(1, len(dlm.tokenizer.encode(canonical)))
    plan = spans.plan_infill(f"{prompt}⟦fill:{n}⟧{suffix}", dlm.vocab, None, None)
    decoder = wiring.make_decoder("low-confidence", {"guard": "true"}, None)
    job = wiring.wired(fill.Job(plan, dlm, decoder, 0, lang, originals=(canonical,)))
    found = job.decoder.completer.witness
    if found is None:
        return None
    canvas = dataclasses.replace(plan.canvas, tokens=found)
    return spans.splice(plan, canvas, dlm.tokenizer, drop_ids=dlm.special_ids).text


PYTHON = [
    (  # site.py: an `else:` body, the `except` of the outer `try`, an `if` whose body and `else` come after
        "def f():\n    try:\n        try:\n            import sitecustomize\n        except ImportError as exc:\n"
        "            if exc.name == 'sitecustomize':\n                pass\n            else:\n",
        "                raise\n    except Exception as err:\n        if sys.flags.verbose:",
        "\n            sys.excepthook(*sys.exc_info())\n        else:\n            sys.stderr.write('x')\n\n\n"
        "def g():\n    pass\n",
    ),
    (  # difflib.py: a loop head for the lines below, which `break`
        "def f(lines):\n    lines = []\n",
        "    num = 0\n    while True:\n        # Load up next 4 lines so we can look ahead, create strings which",
        "\n        # are a concatenation\n        while len(lines) < 4:\n            lines.append(1)\n"
        "        if lines:\n            break\n        num += 1\n",
    ),
    (  # enum.py: the last operand of a bracketed expression, on its own line at the lines' indentation
        "def f(obj):\n    return (\n            hasattr(obj, '__get__') or\n            hasattr(obj, '__set__') or\n",
        "            hasattr(obj, '__delete__')\n            )\n",
        "\ndef g(name):\n    return name\n",
    ),
    (  # enum.py: a method's head, then the docstring the code after the hole is inside of
        "class E:\n    def a(self):\n        return 1\n\n",
        '    def b(self, x):\n        """\n        Returns b.\n',
        '\n        x: the thing\n        """\n        return x\n',
    ),
    (  # imaplib.py: a head whose line the next one goes on with a backslash
        "def f(self, typ):\n    if typ:\n        pass\n",
        "    if 'READ-ONLY' in self.untagged_responses \\",
        "\n        and not self.is_readonly:\n        raise ValueError('x')\n    return 1\n",
    ),
    (  # encodings/cp857.py: the code after the hole starts inside a comment the hole must open
        "decoding_table = (\n    '\\x0d'     #  0x000d -> CARRIAGE RETURN\n    '\\x0e",
        "'     #  0x000e -> SHIFT O",
        "UT\n    '\\x0f'     #  0x000f -> SHIFT IN\n)\n",
    ),
    (  # pathlib.py (a typo fill of `dlmcode speed --guard --typos`): a hole that starts a continuation line of an
        # `if (` head must end its expression, close the bracket and open the block the lines below indent under
        "class P:\n    def expanduser(self):\n        if (not (self._drv or self._root) and\n",
        "            self._parts and self._parts[0][:1] == '~'):\n"
        "            homedir = os.path.expanduser(self._parts[0])\n            if homedir[:1] == '~':\n",
        "                raise RuntimeError('no home')\n            return self._from_parts([homedir])\n"
        "        return self\n",
    ),
    (  # multiprocessing/connection.py (held out): the hole opens a loop, whose try's `else` the lines below
        # `break` out of: a bridge's `if x:` would leave that `break` outside any loop
        "def client(address):\n    t = timeout()\n",
        "    while 1:\n        try:\n            wait(address, 1000)\n",
        "            h = create(\n                address, 0,\n                )\n        except OSError as e:\n"
        "            if e.winerror not in (1, 2) or check(t):\n                raise\n"
        "        else:\n            break\n    else:\n        raise\n    return h\n",
    ),
    (  # locale.py: a head whose colon and line break the hole holds
        "def format_string(f, val, grouping=",
        "False, monetary=False):\n",
        '    """Formats a string."""\n    return f % val\n',
    ),
    (  # the indent attack: a cut in a keyword (`ex` | `cept`)
        "try:\n    x = 1\n",
        "ex",
        "cept ValueError:\n    x = 2\n",
    ),
    (  # locale.py: a dict's key cut, its value a string the code after the hole is inside of
        "aliases = {\n    'koi8c':       'KOI8-C',\n    'micro",
        "softcp1251':  'CP1",
        "251',\n    'other':       'x',\n}\n",
    ),
    (  # locale.py: a `try:` line between two `except` clauses' `try` statements (the window bug)
        "try:\n    from _locale import getencoding\nexcept ImportError:\n    def getencoding():\n"
        "        return 'utf-8'\n\n",
        "try:",
        "\n    CODESET\nexcept NameError:\n    def f():\n        return 1\nelse:\n    def f():\n        return 2\n",
    ),
]

HUMANEVAL = [  # HumanEval-infilling's cuts without a first witness before (multi-line 71 of 5,815, single 3), shortened
    (  # 95: lines that `break` at several depths below the hole: a loop must be the outermost of their heads
        'def f(d):\n    """Doc."""\n\n',
        "    for k in d:\n        if k:\n",
        "            s = 1\n            break\n        if s:\n            if k:\n                break\n    return s\n",
    ),
    (  # 95: ... and an `elif` begins them
        'def f(d):\n    """Doc."""\n\n',
        "    for k in d:\n        if k:\n            if k.isupper():\n                s = 1\n",
        "            elif k.islower():\n                s = 2\n            else:\n                break\n    return\n",
    ),
    (  # 150: a body, then a loop whose `else` and `break` come after
        "def f(n, x, y):\n    if n == 1:\n",
        "        return y\n    for i in range(2, n):\n",
        "        if n % i == 0:\n            return y\n            break\n    else:\n        return x\n",
    ),
    (  # 105: an `except:` in four tokens (`except x:` is five)
        "def f(a, d):\n    out = []\n    for v in a:\n        try:\n            out.append(d[v])\n",
        "        except:\n",
        "            pass\n    return out\n",
    ),
    (  # 124: a `try` around the lines the hole holds, its `except` below them
        'def f(d):\n    """Doc."""\n\n',
        "    try:\n        d = d.strip()\n        if d:\n",
        "            return False\n        if d == 'x':\n            return False\n    except:\n        return False\n"
        "    return True\n",
    ),
    (  # 135: the code after indents by two spaces where the code before indents by four
        "def f(a):\n    i = 1\n    while i < len(a):\n",
        "      if a[i] < a[i-1]:\n",
        "        ind = i\n      i += 1\n    return ind\n",
    ),
]

C_FAMILY = [
    (  # a header's `#endif` cut inside its comment: the code after starts inside the comment
        "c",
        "#ifndef _X_H\n#define _X_H\nstruct s {\n\tunsigned int op;\n};\n",
        "\n#endif /* ",
        "_X_H */\n",
    ),
    ("c", "#ifndef _X_H\n#define _X_H\n", "\n#inc", "lude <linux/types.h>\n\nenum { A, B };\n\n#endif\n"),
    ("c", "#ifndef _X_H\n#define _X_H\n", "\n#include <linux/ty", "pes.h>\n\nenum { A, B };\n\n#endif\n"),
    (  # a macro's line the hole must continue with a backslash
        "c",
        "#define MASK \\\n\t(A | \\\n",
        "\t B | \\",
        "\n\t C)\n\nstruct s {\n\tint x;\n};\n",
    ),
    (  # a block whose `}` is followed by `catch`: the hole holds the `try {`
        "javascript",
        "async function f () {\n  let v = []\n ",
        " try {",
        "\n    v = 1\n  } catch (err) {\n    v = 2\n  }\n  return v\n}\n",
    ),
    ("javascript", "function f (c) {\n  for (const x of c) {\n  ", "  le", "t fd = x\n    fd += 1\n  }\n}\n"),
    (
        "javascript",
        "async function f (win) {\n  const x = 1\n ",
        "   if",
        " (win) {\n    process.env.X = x\n  }\n  return x\n}\n",
    ),
    (  # a template literal's `${` that the hole must close
        "javascript",
        "function f (dir) {\n  process.env.PATH = `${buildBinsDi",
        "}`\n ",
        "   return dir\n}\n",
    ),
]


CPP = [  # the C++ attack class's cuts (libstdc++'s `pb_ds/detail` headers), shortened
    (  # a macro's `#x` is no comment: the brackets its line opens are closed in it, not left open
        "cpp",
        '#define V(c) \\\n  f(m(#c " x"), 1)\nstruct s\n',
        "{",
        "\n  int x;\n};\n",
    ),
    ("cpp", "namespace n\n{\n", "#define C_DEC \\", "\n    it_<N, A>\n\n  struct s { };\n}\n"),  # its last line below
    ("cpp", "#ifndef X_HPP\n#define X_HPP\nnamespace n\n{\n}\n", "\n#endif // #ifndef X_H", "PP\n"),  # in a comment
    ("cpp", "#ifndef X_HPP\n#define X_HPP\nnamespace n\n{\n}\n", "\n#endif // #ifndef", " X_HPP\n"),
    ("cpp", "struct s\n{\n#ifdef D\n  void\n  f(const char", "*, int) const;\n#end", "if\n\n  int m;\n};\n"),
    ("cpp", "#ifndef X\n#define X\nstruct s\n{\n  int m;\n", "};\n#", "endif\n"),  # a `};` before the directive
    ("cpp", "#include <a/b.hpp>\n#include <a/de", "tail/c.hpp>\n#undef X_INDICATO", "R\n#undef Y\n\nint x;\n"),
    (  # a template's parameter list: the hole closes the inner one
        "cpp",
        "namespace n\n{\n  template<typename K,\n\t   template<typename N,\n\t\t    class C,\n\t\t ",
        "     typename _A>",
        "\n\t   class U,\n\t   typename A>\n  struct t\n  {\n    int m;\n  };\n}\n",
    ),
    ("cpp", "struct s\n{\n  typedef\n   ", "   it_<", "\n\ttypename A::pointer,\n\ttrue>\n  point_iterator;\n};\n"),
    (  # ... or opens it
        "cpp",
        "namespace n\n{\n  template<typename K,\n\t   typename M,\n\t  ",
        " template<typename N,",
        "\n\t\t    typename I>\n\t   class U,\n\t   typename A>\n  struct t\n  { };\n}\n",
    ),
    ("cpp", "namespace n\n{\n  struct a { };\n ", "   template<typename Ke", "y,\n\t  typename C>\n  struct t { };\n}"),
    (  # a declaration's head the hole cut: an access specifier, a keyword, a struct's or namespace's name
        "cpp",
        "template<typename K>\n  struct d\n  {\n    ",
        "  private",
        ":\n\ttypedef K k;\n  public:\n\ttypedef K j;\n  };\n",
    ),
    ("cpp", "namespace n\n{\n  ", "  t", "emplate<typename E>\n    class c\n    {\n      int m;\n    };\n}\n"),
    (
        "cpp",
        "namespace n\n{\n  template<typename K, typename P>\n  ",
        "  struct d_disp",
        "atch<K, null_type, gp_tag,\n\t\t\t\t   P>\n    {\n    private:\n      typedef at<P, 0>\tat0;\n    };\n}\n",
    ),
    ("cpp", "namespace g\n{\n ", " namespace ", "detail\n  {\n    struct s { };\n  } // namespace detail\n}\n"),
    ("cpp", "template<typename K>\n  struct t : public b<K>\n  ", "  { };", "\n\nint x;\n"),  # a class body and `;`
    (  # a `}` and the line comment the code after goes on with
        "cpp",
        "namespace g\n{\n  namespace detail\n  {\n    struct s { };\n ",
        " } // namespace d",
        "etail\n} // namespace g\n",
    ),
    ("cpp", "struct it\n{\n  inline\n ", " it(int p) : m(p)", "\n  { }\n\n  int m;\n};\n"),  # a constructor's head
]

LONG_DICT = "aliases = {\n" + "".join(f"    'k{i:04d}':                 'value{i:04d}',\n" for i in range(700))
PYTHON += [  # issue 26's fourth round: the attack classes' and heldout-span's last give-ups
    (  # xdrlib.py: a docstring closed, then a method's head; a one-line `if x: y` and its `else: z` below
        'class Error(Exception):\n    """Exception class.\n\n    Public ivars:\n        msg -- the message\n\n ',
        '   """\n    def __init__(self, msg):',
        "\n        self.msg = msg\n\n\nclass Packer:\n    def pack_bool(self, x):\n"
        "        if x: self.write(1)\n        else: self.write(0)\n",
    ),
    (  # uu.py: a `try:` line whose `finally` is more than 40 lines below, under a deeper block above
        "def f(in_file):\n    opened = []\n    if in_file:\n        opened.append(in_file)\n\n",
        "    try:",
        "\n        while True:\n"
        + "".join(f"            x{i} = {i}\n" for i in range(45))
        + "    finally:\n        pass\n",
    ),
    (  # locale.py: a dict's key cut in a literal that began more than 16,000 characters above
        LONG_DICT + "    'zh_hk':                    'zh_HK.big5hkscs',\n ",
        "   'zh_hk.big5hk':    ",
        "                 'zh_HK.big5hkscs',\n    'zh_sg':                    'zh_SG.GB2312',\n}\n",
    ),
    (  # imaplib.py: a dict's value cut inside a string of a tuple: key, colon, bracket and quote
        "commands = {\n    'AUTH':     ('AUTH',),\n    'UID':      ('SELECTED',),",
        "\n    'UNSUB':    ('AUTH', 'SELECTED",
        "'),\n    'UNSELECT': ('SELECTED',),\n    }\n",
    ),
    (  # multiprocessing/util.py: from inside a comment to inside a word of a comprehension's iterable
        "def f(registry):\n    # list(_finalizer_registry) should be atomic",
        ", while\n    # list(x.items()) is not.\n    keys = [key for key in list(_fin",
        "alizer_registry) if f(key)]\n    keys.sort(reverse=True)\n    return keys\n",
    ),
]
PYTHON.append(
    (  # multiprocessing/util.py, tab-indented: a function's head before the docstring the code after is inside of
        "class F:\n\tdef r(self):\n\t\tif self.x:\n\t\t\tx = 1\n\t\treturn x\n\n\n",
        "def run(minpriority=None):\n\t'''\n\tRun all finalizers",
        "\n\n\tFinalizers first.\n\t'''\n\tif registry is None:\n\t\treturn\n\tkeys = [1]\n",
    )
)

C_FAMILY += [  # issue 26's fourth round: preprocessor lines, structs, template literals, comments
    ("c", "#ifndef _X_H\n#define _X_H\nstruct s {\n\tint x;\n};\n\n", "#endif", "\n"),
    ("c", "#ifndef _X_H\n#define _X_H\nenum e {\n\tA,\n\tB\n", "};\n#define E_MA", "X (B - 1)\n\n#endif\n"),
    ("c", "#ifndef _X_H\n#define _X_H\nstruct s {\n\tint x;\n}", ";\n#endif /* _X_", "H */\n"),
    ("c", "#ifndef _X_H\n#define _X_H\nstruct s {\n\tint x;\n};\n", "\n#endif /", "*_X_H*/\n"),
    ("c", "#ifndef _X_H\n#define _X_H\nstruct s {\n\tint x;\n};\n", "\n#endif /* _X_H *", "/\n"),
    ("c", "struct s {\n\tint op;\n\tunion {\n\t", "\tstruct {", "\n\t\t\tint ect;\n\t\t} tcp;\n\t} proto;\n};\n"),
    (
        "c",
        "struct s {\n\tunion {\n\t\tstruct {\n\t\t\tint p;\n\t",
        "\t} random;",
        "\n\t\tstruct {\n\t\t\tint n;\n\t\t} nth;\n\t} u;\n};\n",
    ),
    ("c", "struct s {\n\tint patlen;\n\tunion {\n\t", "\tstruct", " {\n\t\t\tint invert;\n\t\t} v0;\n\t} u;\n};\n"),
    (
        "c",
        "struct s {\n\tunion {\n\t\tint f[2];\n\t\tstruct {\n\t",
        "\t\tint g[DI",
        "M_MAX];\n\t\t\tint dim;\n\t\t} c;\n\t} u;\n};\n",
    ),
    ("c", "#define A 1\n\n", "#define FLAGS (A \\", "\n\t\t| B \\\n\t\t| C)\n\nint x;\n"),
    ("cpp", "struct d {\n  d(int* p)\n    : m_p(p)\n    ", "  { }", "\n\n  int* m_p;\n};\n"),
    ("javascript", "const a = [\n  `${files}\\\\Python${maj", "orMinor}-32\\", "\\python.exe`\n]\n"),
    (
        "javascript",
        "const o = {\n  headers: {\n    'User-Agent': `node ${process.ve",
        "rsion}`,\n    Conn",
        "ection: 'keep-alive'\n  }\n}\n",
    ),
    (
        "javascript",
        "function f () {\n  // The `npm_conf",
        "ig_` keys.\n  con",
        "st x = /^npm_config_/i\n  return x\n}\n",
    ),
    (
        "javascript",
        "function f () {\n  // See the docs\n ",
        "   // - `npm_config_<key>` f",
        "or values\n  //   in package.json.\n  return 1\n}\n",
    ),
    ("javascript", "function f (v) {\n  v.a = 1\n ", " if (v.targe", "t_arch === 'arm64') {\n    v.b = 2\n  }\n}\n"),
    (
        "javascript",
        "function f (r) {\n  log.verbose('need to download `' + r.name + '",
        ".lib`...')\n",
        "  const dir = r.dir\n  return dir\n}\n",
    ),
    (
        "javascript",
        "f(\n  { name: 'clean', args: [] }\n  , { name: 'configure', args: [] }\n ",
        " , { name: 'buil",
        "d', args: [] }\n)\n",
    ),
    (
        "javascript",
        "const C = {\n  wrap: (str, codes) => {\n    return `\\x1b[${c",
        "odes.join(';')}m${str}\\x1b[0m`\n  },",
        "\n  inverse: 7,\n  fg: {\n    black: 30\n  }\n}\n",
    ),
]


@pytest.mark.parametrize("prompt, canonical, suffix", PYTHON + HUMANEVAL)
def test_python_cuts_get_a_first_witness_that_compiles(prompt, canonical, suffix, shipped):
    text = witness_text(shipped, prompt, canonical, suffix, "python")
    assert text is not None, "no first witness"
    assert text.startswith(prompt) and text.endswith(suffix)
    compile(text, "<witness>", "exec")  # the whole file, not only the judge's window


@pytest.mark.parametrize("lang, prompt, canonical, suffix", C_FAMILY + CPP)
def test_c_family_cuts_get_a_first_witness_that_parses(lang, prompt, canonical, suffix, shipped):
    text = witness_text(shipped, prompt, canonical, suffix, lang)
    assert text is not None, "no first witness"
    assert text.startswith(prompt) and text.endswith(suffix)
    assert syntax.check(text, lang).ok, syntax.check(text, lang).problems


METHODS = "".join(f"    def m{i}(self):\n        return {i}\n\n" for i in range(8))  # 24 lines between typo and hole
TYPOS = [  # `dlmcode speed --guard --typos`' give-ups, shortened: (typo, prompt, canonical, suffix)
    (  # queue.py: an unclosed bracket far above reads, to the fillers, as the hole's to close
        "value = call(1,\n",
        "value = call(1,\n\n\nclass Q:\n" + METHODS + "    def done(self):\n        '''Mark a task done.\n\n"
        "        Raises a ValueError.\n",
        "        '''\n        with self.lock:\n            left = self.left - 1\n",
        "            if left <= 0:\n                raise ValueError('too many')\n            self.left = left\n",
    ),
    (  # pathlib.py: the same, an `except` the hole must write
        "value = call(1,\n",
        "value = call(1,\n\n\nclass P:\n" + METHODS + "    def r(self, key):\n        try:\n"
        "            return key + 1\n",
        "        except TypeError:\n            return NotImplemented\n",
        "\n    @property\n    def parent(self):\n        return self\n",
    ),
    (  # textwrap.py: a broken line far below reads as the lines after the hole that no bridge fits
        "value = = 1\n",
        "class W:\n    def __init__(self,\n                 width=70,\n                 *,\n",
        "                 placeholder=' [...]'):\n        self.width = width\n        self.indent = indent\n",
        "        self.tabs = tabs\n        self.drop = drop\n\n" + METHODS + "value = = 1\n",
    ),
]


@pytest.mark.parametrize("typo, prompt, canonical, suffix", TYPOS)
def test_a_typo_elsewhere_leaves_a_first_witness_that_compiles_once_it_is_fixed(
    typo, prompt, canonical, suffix, shipped
):
    """The judge sets the user's typo aside (a window without it, text/judge.py); the fillers then read that window
    too (jobs/guarding.JobGuard.clipped), where the whole file showed them the typo."""
    text = witness_text(shipped, prompt, canonical, suffix, "python")
    assert text is not None, "no first witness"
    assert text.startswith(prompt) and text.endswith(suffix)
    compile(text.replace(typo, "", 1), "<witness>", "exec")
