"""What of a sandboxed command's output may reach the person's terminal.

``OutputFilter`` is a streaming state machine (the shape of the DEC/ECMA-48 parser every
terminal runs) over the bytes a command writes to its pseudo-terminal: it passes what
protocol: runs#output-filter allows and drops everything else, sequence by sequence,
failing closed (protocol: runs#terminal-drawn-by-promoter). At most ``MAX_PARAMS`` bytes
of parameters and three bytes of a character are held; text runs, whole CSIs and string
bodies are matched by regular expressions with the state machine's outcome (a property
test holds them equal).

Not here: any I/O (``promoter.executor.pane``), an emulation of the screen, a judgement of
the text itself (bidirectional controls and look-alikes pass as text), and the reset
before a review (``RESET`` is that sequence; the CLI writes it).
"""

from __future__ import annotations

import codecs
import functools
import re
from enum import Enum

__all__ = ["MAX_PARAMS", "RESET", "OutputFilter"]

MAX_PARAMS = 128  # bytes of CSI parameters held; a longer sequence is dropped whole

# The person's terminal to a known state, without losing what is on the screen: out of the
# alternate screen, the full screen as scroll region (the cursor kept where it was),
# cursor shown, no colours, autowrap on, insert mode, origin mode, left/right margins,
# mouse reports, bracketed paste and application keys off, ASCII charset; a fresh line.
RESET = (
    "\x1b[?1049l\x1b[?47l\x1b7\x1b[r\x1b8\x1b[?69l\x1b[?25h\x1b[0m\x1b[?7h\x1b[4l"
    "\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l\x1b[?1l\x1b>\x1b(B\x0f\r\n"
)

_KEPT_CONTROLS = frozenset("\n\r\t\b")
_CAN, _SUB, _ESC, _BEL, _DEL = "\x18", "\x1a", "\x1b", "\x07", "\x7f"
_STRINGS = frozenset("]PX^_")  # OSC, DCS, SOS, PM, APC
_C1_ST = "\x9c"
# text with nothing to decide: no C0 but the kept four, no DEL, no C1
_PLAIN = re.compile(r"[^\x00-\x07\x0b-\x0c\x0e-\x1f\x7f-\x9f]+")
# a CSI whole within one read, with nothing in it that a terminal would act on mid-way
_WHOLE_CSI = re.compile(r"\x1b\[([\x20-\x3f]*)([\x40-\x7e])")
_STRING_END = re.compile("[\x07\x18\x1a\x1b\x9c]")  # what may end a string, or ESC
_SGR_CODES = frozenset(
    {0, 1, 2, 3, 4, 5, 7, 9, 21, 22, 23, 24, 25, 27, 28, 29, 39, 49, 53, 55, 59}
    | set(range(30, 38))
    | set(range(40, 48))
    | set(range(90, 98))
    | set(range(100, 108))
)
_EXTENDED = frozenset({38, 48, 58})  # foreground, background, underline colour


class _State(Enum):
    GROUND = "ground"
    ESCAPE = "escape"  # after ESC
    ESCAPE_INTERMEDIATE = "escape_intermediate"  # ESC then 0x20-0x2F
    CSI = "csi"  # after ESC [, parameters held
    CSI_IGNORE = "csi_ignore"  # a CSI too long or malformed: consumed until its final
    STRING = "string"  # OSC, DCS, SOS, PM, APC: consumed until a terminator
    STRING_ESCAPE = "string_escape"  # ESC inside a string: ST, or a new sequence


class OutputFilter:
    """Feed it the command's bytes; it returns the bytes that may reach the terminal."""

    def __init__(self, *, ascii_only: bool = False) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._ascii_only = ascii_only
        self._state = _State.GROUND
        self._params: list[str] = []
        self._held = 0
        self._coloured = False
        self._last = "\n"  # the last character passed: the output starts on a line of its own

    def feed(self, data: bytes) -> bytes:
        """The part of ``data`` (after what was fed before) that may be shown."""
        return self._run(self._decoder.decode(data, final=False))

    def finish(self) -> bytes:
        """The end of the stream: colours reset and a last newline, where needed.

        An incomplete character or sequence left at the end is dropped.
        """
        out = self._run(self._decoder.decode(b"", final=True))
        self._state = _State.GROUND
        tail = ""
        if self._coloured:
            tail += "\x1b[0m"
            self._coloured = False
        if self._last != "\n":
            tail += "\n"
            self._last = "\n"
        return out + tail.encode("utf-8")

    def _run(self, text: str) -> bytes:
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            if self._state is _State.GROUND:
                plain = _PLAIN.match(text, i)
                if plain is not None:
                    self._text(plain.group(), out)
                    i = plain.end()
                    continue
                whole = _WHOLE_CSI.match(text, i)
                if whole is not None:  # the same outcome as character by character, faster
                    params, final = whole.group(1), whole.group(2)
                    if final == "m" and len(params) <= MAX_PARAMS and _sgr_allowed(params):
                        out.append(whole.group())
                        self._coloured = params not in ("", "0")
                    i = whole.end()
                    continue
            elif self._state is _State.STRING:
                end = _STRING_END.search(text, i)
                if end is None:
                    break  # all of it is the string's: consumed
                i = end.start()
            self._step(text[i], out)
            i += 1
        return "".join(out).encode("utf-8")

    def _text(self, run: str, out: list[str]) -> None:
        if self._ascii_only and not run.isascii():
            run = "".join(c if c.isascii() else "?" for c in run)
        out.append(run)
        self._last = run[-1]

    def _step(self, c: str, out: list[str]) -> None:
        """One character that is not plain text in the ground state, or any in a sequence."""
        state, code = self._state, ord(c)
        if state in (_State.STRING, _State.STRING_ESCAPE):
            self._in_string(c, out)
            return
        if c == _ESC:
            self._state = _State.ESCAPE  # a new sequence, abandoning any one begun
            return
        if c in (_CAN, _SUB):
            self._state = _State.GROUND
            return
        if code < 0x20:
            if c in _KEPT_CONTROLS:
                self._text(c, out)  # executed where it stands, as a terminal does
            return
        if code == 0x7F:
            return
        if code >= 0x80:
            # a C1 control, or a character that is not ASCII inside a sequence: dropped
            self._state = _State.GROUND
            return
        if state is _State.ESCAPE:
            if c == "[":
                self._state, self._params, self._held = _State.CSI, [], 0
            elif c in _STRINGS:
                self._state = _State.STRING
            elif code < 0x30:
                self._state = _State.ESCAPE_INTERMEDIATE
            else:
                self._state = _State.GROUND  # ESC c, ESC 7, ESC M, ESC \, ESC =...: dropped
        elif state is _State.ESCAPE_INTERMEDIATE:
            if code >= 0x30:
                self._state = _State.GROUND  # ESC ( 0, ESC # 8...: dropped
        elif state is _State.CSI:
            if code >= 0x40:
                self._state = _State.GROUND
                params = "".join(self._params)
                if c == "m" and _sgr_allowed(params):
                    out.append(f"\x1b[{params}m")
                    self._coloured = params not in ("", "0")
            elif self._held >= MAX_PARAMS:
                self._state, self._params = _State.CSI_IGNORE, []
            else:
                self._params.append(c)
                self._held += 1
        elif state is _State.CSI_IGNORE and code >= 0x40:
            self._state = _State.GROUND

    def _in_string(self, c: str, out: list[str]) -> None:
        if self._state is _State.STRING_ESCAPE:
            self._state = _State.STRING
            if c == "\\":
                self._state = _State.GROUND  # ST
            else:
                self._state = _State.ESCAPE  # ESC ends the string and begins a sequence
                self._step(c, out)
            return
        if c == _ESC:
            self._state = _State.STRING_ESCAPE
        elif c in (_BEL, _CAN, _SUB, _C1_ST):
            self._state = _State.GROUND


@functools.lru_cache(maxsize=256)
def _sgr_allowed(params: str) -> bool:
    """Whether ``ESC [ params m`` only sets colours and attributes in ``_SGR_CODES``."""
    fields = params.split(";")
    i = 0
    while i < len(fields):
        field = fields[i]
        if ":" in field:  # ITU T.416 sub-parameters: 38:2::R:G:B, 38:5:N, 4:3
            if not _sub_parameters_allowed(field.split(":")):
                return False
            i += 1
            continue
        code = _number(field)
        if code is None:
            return False
        if code in _EXTENDED:
            kind = _number(fields[i + 1]) if i + 1 < len(fields) else None
            width = {5: 1, 2: 3}.get(kind) if kind is not None else None
            values = fields[i + 2 : i + 2 + width] if width else []
            if not width or len(values) != width or not all(_byte(v) for v in values):
                return False
            i += 2 + width
            continue
        if code not in _SGR_CODES:
            return False
        i += 1
    return True


def _sub_parameters_allowed(parts: list[str]) -> bool:
    code, rest = _number(parts[0]), parts[1:]
    if code == 4:
        return len(rest) == 1 and rest[0] in ("0", "1", "2", "3", "4", "5")
    if code not in _EXTENDED or not rest:
        return False
    if rest[0] == "5":
        return len(rest) == 2 and _byte(rest[1])
    if rest[0] == "2":  # 2:R:G:B, or 2:ID:R:G:B with an empty or numeric colour space
        rgb = rest[1:] if len(rest) == 4 else rest[2:] if len(rest) == 5 else []
        space_ok = len(rest) == 4 or rest[1] == "" or _number(rest[1]) is not None
        return len(rgb) == 3 and space_ok and all(_byte(v) for v in rgb)
    return False


def _number(field: str) -> int | None:
    if field == "":
        return 0
    if len(field) > 6 or not all("0" <= c <= "9" for c in field):
        return None
    return int(field)


def _byte(field: str) -> bool:
    value = _number(field)
    return field != "" and value is not None and value <= 255
