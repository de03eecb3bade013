"""A progress bar over a diffusers pipeline's denoising steps, in a notebook (an ipywidgets bar,
through ``tqdm.auto``) or a terminal, with the compilations and recompilations seen so far."""

from __future__ import annotations

from typing import IO, Any

from .. import _install
from ..errors import MediaError


def _tqdm_class(notebook: bool | None) -> Any:
    try:
        if notebook is None:
            from tqdm.auto import tqdm
        elif notebook:
            from tqdm.notebook import tqdm
        else:
            from tqdm.std import tqdm
    except ImportError as exc:  # tqdm comes with diffusers (through huggingface_hub)
        raise ImportError(f"The progress bar needs tqdm: {_install.hint('hf')}") from exc
    return tqdm


class Progress:
    """``with Progress(pipe): pipe(...)`` shows one bar per pipeline call.

    ``notebook``: ``None`` picks the notebook widget in Jupyter and text elsewhere
    (``tqdm.auto``), ``True``/``False`` force one; ``file``: where the text bar goes
    (default stderr). ``bars`` keeps the bars shown, newest last.
    """

    def __init__(
        self,
        pipe: Any,
        *,
        desc: str = "denoising",
        notebook: bool | None = None,
        file: IO[str] | None = None,
    ) -> None:
        if not callable(getattr(pipe, "progress_bar", None)):
            raise MediaError(
                f"{type(pipe).__name__} has no progress_bar method: Progress follows diffusers "
                f"pipelines (DiffusionPipeline subclasses)."
            )
        self.pipe = pipe
        self.desc = desc
        self.notebook = notebook
        self.file = file
        self.bars: list[Any] = []
        self._compiles = 0
        self._recompiles = 0
        self._saved: Any = None
        self._unsubscribe: Any = None

    def _postfix(self) -> str:
        return f"compiles {self._compiles}, recompiles {self._recompiles}"

    def _bar(self, iterable: Any = None, total: int | None = None) -> Any:
        """Replaces ``pipe.progress_bar`` (same arguments as diffusers')."""
        tqdm = _tqdm_class(self.notebook)
        kwargs = {"desc": self.desc, "unit": "step", "leave": True}
        if self.file is not None:
            kwargs["file"] = self.file
        bar = tqdm(iterable, total=total, **kwargs)
        bar.set_postfix_str(self._postfix(), refresh=False)
        self.bars.append(bar)
        return bar

    def _on_event(self, snapshot: Any) -> None:
        event = snapshot.event
        if event is None or event.kind not in ("compile", "recompile"):
            return
        if event.kind == "compile":
            self._compiles += 1
        else:
            self._recompiles += 1
        if self.bars:
            self.bars[-1].set_postfix_str(self._postfix())

    def __enter__(self) -> Progress:
        from ..events import log

        self._saved = self.pipe.__dict__.get("progress_bar")
        self.pipe.progress_bar = self._bar
        self._unsubscribe = log.subscribe(self._on_event)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._unsubscribe()
        if self._saved is None:
            del self.pipe.progress_bar
        else:
            self.pipe.progress_bar = self._saved
        for bar in self.bars:
            bar.close()

    def run(self, **kwargs: Any) -> Any:
        """Call the pipeline with a bar; returns its output."""
        with self:
            return self.pipe(**kwargs)


def progress(pipe: Any, *, notebook: bool | None = None, file: IO[str] | None = None) -> Progress:
    """A progress bar for ``pipe``'s calls: ``with tpu_lab.media.progress(pipe): pipe(...)``."""
    return Progress(pipe, notebook=notebook, file=file)
