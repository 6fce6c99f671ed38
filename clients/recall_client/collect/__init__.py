"""Collectors: they run where the data is (the agent's machine) and store what they find through a
:class:`~recall_client.RecallClient`, idempotently, so running one again stores nothing twice.

* :func:`collect_git`: commits as ``event`` beads, each ``FOLLOWS_FROM`` its first parent (commits the hub
  refuses or no longer shows are skipped, and the chain steps over them);
* :func:`run_and_record`: a command's line, exit status, duration and output tail as an ``event`` bead,
  a success linked to the failure of the same command it fixed (:func:`record_run` for one already run);
* :func:`collect_docs`: Markdown sections as beads ``PART_OF`` their document's topic hub.
"""

from .docs import DocsReport, collect_docs, markdown_sections
from .git import GitReport, Skipped, collect_git
from .git_log import GitError
from .shell import CommandRun, record_run, run_and_record, tail_of

__all__ = [
    "CommandRun",
    "DocsReport",
    "GitError",
    "GitReport",
    "Skipped",
    "collect_docs",
    "collect_git",
    "markdown_sections",
    "record_run",
    "run_and_record",
    "tail_of",
]
