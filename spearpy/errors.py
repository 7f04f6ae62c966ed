"""The exceptions spearpy raises to its embedder (guests never see exceptions:
they get errno values and error bodies)."""

from __future__ import annotations

from spearpy.outcome import Outcome


class SpearpyError(Exception):
    """Base of every exception spearpy raises."""


class ModuleLoadError(SpearpyError):
    """The module cannot be read, compiled or linked."""

    @classmethod
    def invalid(cls, wasm: bytes, reason: BaseException) -> ModuleLoadError:
        """For bytes wasmtime refused to compile. wasmtime reads anything
        without the binary magic as WAT text, so a random file would otherwise
        be reported as a WAT syntax error."""
        kind = ("wasm binary" if wasm[:4] == b"\0asm"
                else "wasm binary (no \\0asm header) or WAT text")
        lines = str(reason).strip().splitlines()
        return cls(f"not a valid {kind}: {lines[0] if lines else type(reason).__name__}")


class ConfigError(SpearpyError, ValueError):
    """The host configuration is unusable (bad config file, backend spec, unreadable
    script...). Also a ValueError: a bad value is what it is."""


class HostInterrupt(SpearpyError):
    """Raised inside a hostcall to end the guest with a trap (deadline, cancel, limits)."""

    def __init__(self, outcome: str, message: str) -> None:
        super().__init__(message)
        self.outcome = Outcome(outcome)  # a bad name fails here, where it was raised
        self.message = message


class GuestCallError(SpearpyError):
    """A call into the guest trapped or failed; `exit_code` is set for proc_exit."""

    def __init__(self, message: str, trap_code: int | None = None,
                 exit_code: int | None = None) -> None:
        super().__init__(message)
        self.trap_code = trap_code
        self.exit_code = exit_code
