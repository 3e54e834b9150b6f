"""Every setting of atwhois: the one table (`table`), and reading the file and the
variables against it (`reading`). The library reads them through
`atwhois.Config.from_environment()`; the command line adds its flags (`cli.configuration`)."""

from .reading import (
    CONFIG_ENV,
    SettingError,
    check,
    from_environment,
    from_file,
    given,
    parse_bool,
    read_file,
)
from .table import (
    AUDITS,
    GROUP_TITLES,
    MIRROR,
    RESOLUTION,
    SERVICE,
    SETTINGS,
    STORAGE,
    Setting,
    Values,
    names_in,
)

__all__ = [
    "AUDITS",
    "CONFIG_ENV",
    "GROUP_TITLES",
    "MIRROR",
    "RESOLUTION",
    "SERVICE",
    "SETTINGS",
    "STORAGE",
    "Setting",
    "SettingError",
    "Values",
    "check",
    "from_environment",
    "from_file",
    "given",
    "names_in",
    "parse_bool",
    "read_file",
]
