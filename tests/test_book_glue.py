import numpy as np

from helpers.interconnect import fits as alphabeta
from helpers.core import glue as book


def test_plain_turns_numpy_scalars_into_python_numbers():
    v = book.plain(np.float64(11.0))
    assert type(v) is float and repr(v) == "11.0"
    assert book.plain(np.int64(8)) == 8 and type(book.plain(np.int64(8))) is int
    arr = np.arange(3)
    assert book.plain(arr) is arr


def test_strings_display_without_quotes():
    assert repr(book.plain("NS")) == "NS"


def test_bandwidth_units():
    # 1 GB in 1 second is 1 GB/s (10^9 B/s)
    assert alphabeta.bandwidth_GBps(1e9, 1e6) == 1.0


def test_figures_become_png_images():
    from helpers.core import plotting

    fig, ax = plotting.figure()
    ax.plot([1, 2], [3, 4])
    img = book.plain(fig)
    data = img._repr_png_()
    if isinstance(data, tuple):  # (data, metadata): the figure carries its alt text
        data, meta = data
        assert meta["alt"]
    assert (data[:4] == b"\x89PNG") if isinstance(data, bytes) else data.startswith("iVBOR")
