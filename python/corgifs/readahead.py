"""A file read one chunk ahead of its reader, by a thread.

Why. A corgifs mount serves its parts with direct I/O: every read(2) of a
part waits for the daemon to gather its records and reply, and nothing in
the kernel reads ahead of the reader. Read one after another, the daemon's
work and the reader's parsing add up (0.47x of the source files' speed for
the raw TFRecord reader of 1 KiB records, BENCHMARKS.md). A thread that
asks for the next chunk while the reader parses this one overlaps them;
read(2) releases the GIL, so the thread waits on the daemon, not on the
reader. On local files each read is a page-cache copy and the thread buys
nothing, so corgifs.Dataset uses it for a mount's parts only.
"""

import io
import queue
import threading

__all__ = ["ReadAhead"]

_DONE = object()


class ReadAhead:
    """Wraps a binary file f opened unbuffered: read() returns the chunks a
    thread read from f in order, depth chunks ahead at most. Only the calls
    a forward reader makes are offered: seek() before the first read (where
    the reading starts), read(), fileno(), close(). An error of the thread's
    read is raised by the read() that reaches it; the bytes before it are
    returned first."""

    def __init__(self, f, chunk=1 << 20, depth=2):
        self._f, self._chunk = f, chunk
        self._q = queue.Queue(depth)
        self._stop = threading.Event()
        self._thread = None
        self._eof = False
        self.name = getattr(f, "name", "<stream>")

    def seek(self, offset, whence=io.SEEK_SET):
        if self._thread is not None:
            raise io.UnsupportedOperation("ReadAhead: seek after the first read")
        return self._f.seek(offset, whence)

    def fileno(self):
        return self._f.fileno()

    def _run(self):
        try:
            while not self._stop.is_set():
                b = self._f.read(self._chunk)
                self._put(b if b else _DONE)
                if not b:
                    return
        except BaseException as e:  # handed to the reader, raised there
            self._put(e)

    def _put(self, item):
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.1)
                return
            except queue.Full:
                pass

    def read(self, n=-1):
        """The next chunk (at most the thread's chunk size; n only asks for
        more bytes than that: they come in the calls after). b"" at the end."""
        if self._eof:
            return b""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="corgifs-readahead", daemon=True)
            self._thread.start()
        item = self._q.get()
        if item is _DONE:
            self._eof = True
            return b""
        if isinstance(item, BaseException):
            self._eof = True
            raise item
        return item

    def close(self):
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():  # free a put that waits on a full queue
                try:
                    self._q.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread.join()
        self._f.close()

    @property
    def closed(self):
        return self._f.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
