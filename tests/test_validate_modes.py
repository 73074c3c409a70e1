"""`python3 -m validate`'s modes are rows of one table (validate/cli.py MODES): a mode this
test defines, which the package has never heard of, is registered in-process as one row and is
chosen by its flag, read by the one parser with its own options, held to the shared rules
(validate/cli.py RULES) and run; the modes already there keep their command lines."""
from __future__ import annotations

import io

from validate import cli


def _count_mode(ran):
    def run(opts, stream):
        ran.append(opts)
        stream.write("counted %d GPU(s)\n" % opts.expect_gpus)
        return 5

    return cli.Mode("--count", "python3 -m validate --count", "Count the GPUs.",
                    ((("--count",), dict(action="store_true", required=True)),
                     (("--expect-gpus",), dict(type=int, metavar="N", dest="expect_gpus", help="how many")),
                     (("--out",), dict(metavar="DIR", help="a folder"))),
                    ("expect_gpus", "out"), run)


def _main(*args):
    stream = io.StringIO()
    return cli.main(list(args), stream=stream), stream.getvalue()


def test_a_mode_added_as_one_row_is_chosen_parsed_checked_and_run(tmp_path, monkeypatch):
    ran: list = []
    monkeypatch.setattr(cli, "MODES", (_count_mode(ran),) + cli.MODES)
    out = tmp_path / "made"
    assert _main("--expect-gpus", "2", "--count", "--out", str(out)) == (5, "counted 2 GPU(s)\n")
    assert out.is_dir() and len(ran) == 1  # its --out made as every mode's is
    assert _main("--count", "--expect-gpus", "-1") == (2, "validate: error: --expect-gpus must be >= 0\n")
    assert _main("--count", "--checks", "xid") == (2, "validate: error: unrecognized arguments: --checks xid\n")
    (tmp_path / "file").write_text("")
    assert _main("--count", "--expect-gpus", "1", "--out", str(tmp_path / "file")) == (
        2, "validate: error: --out %s: exists and is not a folder\n" % (tmp_path / "file"))
    assert len(ran) == 1
    # the modes already there are as they were
    assert _main("--judge") == (2, "validate: error: usage: python3 -m validate --judge FILE.json "
                                   "[--profile FILE|JSON]\n")
    assert _main("--health", "--checks", "xid") == (2, "validate: error: unrecognized arguments: --checks xid\n")
    assert _main("--checks", "xid") == (2, "validate: error: the following arguments are required: --out\n")
