# sandlog's kernel driver: run by python.wasm as a warm session kernel.
#
# Reads frames from fd 0 (an 8-byte little-endian length, then that much
# UTF-8 code), executes each in one persistent `__main__` namespace, prints
# the traceback of an exception as a plain `python -c` would, flushes
# stdout and stderr, writes its status (`sandlog-status:<code>`) to fd 0,
# and blocks reading the next frame. The host decides that an execution is
# over when this driver asks fd 0 for bytes and none are left, so nothing
# the executed code prints can end an execution early.
import posix
import sys

posix.chdir('/app')


def _sandlog_kernel():
    import io

    read = posix.read
    write = posix.write

    def read_exact(count):
        chunks = []
        while count:
            chunk = read(0, count)
            if not chunk:
                posix._exit(0)
            chunks.append(chunk)
            count -= len(chunk)
        return b''.join(chunks)

    def flush():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass

    main = type(sys)('__main__')
    main.__dict__['__builtins__'] = __builtins__
    sys.modules['__main__'] = main
    namespace = main.__dict__
    # Executed code reading stdin sees its end, never a frame.
    sys.stdin = io.StringIO('')
    sys.argv = ['-c']
    while True:
        size = int.from_bytes(read_exact(8), 'little')
        code = read_exact(size).decode('utf-8')
        status = 0
        try:
            exec(code, namespace)
        except SystemExit as exit:
            code_ = exit.code
            if code_ is None:
                status = 0
            elif isinstance(code_, int):
                status = code_ if -2**31 <= code_ < 2**31 else 1
            else:
                try:
                    print(code_, file=sys.stderr)
                except BaseException:
                    pass
                status = 1
        except BaseException as error:
            status = 1
            try:
                # Imported on the first exception, not at start: it pulls in
                # a dozen modules a kernel that never fails does not need.
                import traceback
                traceback.print_exception(type(error), error, error.__traceback__.tb_next)
            except BaseException:
                pass
        flush()
        write(0, b'sandlog-status:' + str(status).encode())


_sandlog_kernel()
