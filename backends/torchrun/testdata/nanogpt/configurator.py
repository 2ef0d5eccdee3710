# Test fixture (fsdpbench), not nanoGPT's code: the shape of nanoGPT's
# configurator.py, which train.py runs with exec() from the directory it runs in.
# Each argument is either a config file to exec, or --key=value overriding a
# global of train.py of the same type; anything else fails with an assert, as
# nanoGPT's does ("--batch_size 4" as two arguments is an AssertionError).
import sys
from ast import literal_eval

for _arg in sys.argv[1:]:
    if "=" not in _arg:
        assert not _arg.startswith("--")
        print(f"Overriding config with {_arg}:")
        with open(_arg) as _f:
            _src = _f.read()
        print(_src)
        exec(_src)
        continue
    assert _arg.startswith("--")
    _key, _val = _arg[2:].split("=")
    if _key not in globals():
        raise ValueError(f"Unknown config key: {_key}")
    try:
        _new = literal_eval(_val)
    except (SyntaxError, ValueError):
        _new = _val
    assert type(_new) == type(globals()[_key])
    print(f"Overriding: {_key} = {_new}")
    globals()[_key] = _new
