"""Runs SQL for chstore's tests on chDB (a current ClickHouse engine in
process). Requests on stdin, answers on stdout, each framed as
op (1 byte: E exec, Q query with a RowBinary answer), a 4-byte
little-endian length and the SQL; answers are a status byte (0 ok, 1
error), a length and the RowBinary result or the error text."""
import struct
import sys

import chdb.session


def main():
    sess = chdb.session.Session(sys.argv[1])
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    while True:
        head = inp.read(5)
        if len(head) < 5:
            return
        op, n = head[:1], struct.unpack("<I", head[1:])[0]
        sql = inp.read(n).decode()
        try:
            if op == b"Q":
                res = sess.query(sql, "RowBinary")
                data = bytes(res.bytes())
            else:
                sess.query(sql)
                data = b""
            out.write(b"\0" + struct.pack("<I", len(data)) + data)
        except Exception as e:  # the test shows the engine's message
            msg = str(e).encode()
            out.write(b"\1" + struct.pack("<I", len(msg)) + msg)
        out.flush()


if __name__ == "__main__":
    main()
