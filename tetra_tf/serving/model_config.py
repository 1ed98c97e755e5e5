"""TF Serving's model server config: the ModelServerConfig text format (--model_config_file,
ModelService.HandleReloadConfigRequest), read with tensorflow-serving-api's own protos.

A config lists models (name, base_path, model_platform, model_version_policy,
version_labels). This module reads and checks one (TF Serving's checks and error texts,
from its ServerCore) and says which versions on disk a model's version policy serves; the
served set itself is manager.py's.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from tetra_tf.errors import TetraError

TENSORFLOW_PLATFORM = "tensorflow"


class ConfigError(TetraError):
    """A model server config that cannot be applied, with TF Serving's status code name
    (INVALID_ARGUMENT, FAILED_PRECONDITION or UNKNOWN) for a reload's answer."""

    def __init__(self, message: str, code: str = "INVALID_ARGUMENT") -> None:
        super().__init__(message)
        self.code = code


def _protos() -> Any:
    from tensorflow_serving.config import model_server_config_pb2

    return model_server_config_pb2


def parse_model_server_config(text: str, source: str = "model config") -> Any:
    """A ModelServerConfig from its text format.

    Raises:
      ConfigError: not a ModelServerConfig in text format.
    """
    from google.protobuf import text_format

    config = _protos().ModelServerConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as e:
        raise ConfigError(f"{source}: not a ModelServerConfig in text format: {e}") from None
    return config


def read_model_server_config(path: str) -> Any:
    """The ModelServerConfig in the text file at path (TF Serving's --model_config_file).

    Raises:
      ConfigError: the file cannot be read, is not UTF-8, or is not a ModelServerConfig.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte {e.start})") from None
    return parse_model_server_config(text, path)


def single_model_config(name: str, base_path: str) -> Any:
    """The config --model_name and --model_base_path stand for (TF Serving's
    BuildSingleModelConfig): one TensorFlow model, its latest version served."""
    config = _protos().ModelServerConfig()
    model = config.model_config_list.config.add()
    model.name, model.base_path, model.model_platform = name, base_path, TENSORFLOW_PLATFORM
    return config


def platform(model: Any) -> str:
    """A ModelConfig's platform (model_platform, or the deprecated model_type).

    Raises:
      ConfigError: neither or both are set, or an unknown model_type.
    """
    protos = _protos()
    if model.model_type != protos.MODEL_TYPE_UNSPECIFIED:
        if model.model_platform:
            raise ConfigError("Illegal setting both ModelServerConfig::model_type "
                              "(deprecated) and ModelServerConfig::model_platform, model "
                              f"name is {model.name}")
        if model.model_type != protos.TENSORFLOW:
            raise ConfigError(f"ModelServerConfig::model_type choice {model.model_type} "
                              "not supported.")
        return TENSORFLOW_PLATFORM
    if not model.model_platform:
        raise ConfigError("Illegal setting neither ModelServerConfig::model_type "
                          "(deprecated) nor ModelServerConfig::model_platform, model name "
                          f"is {model.name}")
    return model.model_platform


def _is_relative(path: str) -> bool:
    return "://" not in path and not os.path.isabs(path)


def check_model_server_config(config: Any, previous: Any | None = None) -> None:
    """Checks a config as TF Serving's ServerCore::ReloadConfig does before applying it:
    a model config list (not custom_model_config), each name once, absolute base paths,
    the "tensorflow" platform, and no platform changed from `previous`.

    Raises:
      ConfigError: the first problem, in TF Serving's words (INVALID_ARGUMENT).
    """
    if config.WhichOneof("config") == "custom_model_config":
        raise ConfigError("ModelServer does not yet support custom model config.")
    names: set[str] = set()
    for model in config.model_config_list.config:
        if model.name in names:
            raise ConfigError(f"Illegal to list model {model.name} multiple times in "
                              "config list")
        names.add(model.name)
    for model in config.model_config_list.config:
        if _is_relative(model.base_path):
            raise ConfigError(f"Expected model {model.name} to have an absolute path or "
                              f"URI; got base_path()={model.base_path}")
    old_platforms = ({model.name: platform(model)
                      for model in previous.model_config_list.config}
                     if previous is not None else {})
    for model in config.model_config_list.config:
        new_platform = platform(model)
        old_platform = old_platforms.get(model.name, new_platform)
        if new_platform != old_platform:
            raise ConfigError(f"Illegal to change a model's platform. For model "
                              f"{model.name} platform was {old_platform} and new platform "
                              f"requested is {new_platform}")
        if new_platform != TENSORFLOW_PLATFORM:
            raise ConfigError(f"Model {model.name} requests unsupported platform "
                              f"{new_platform}")


def policy_versions(on_disk: Iterable[int], policy: Any | None) -> set[int]:
    """The versions among those on disk that a ServableVersionPolicy serves: the
    num_versions highest (latest, the default; at least 1), all, or the specific ones.
    None is the default policy."""
    on_disk = set(on_disk)
    choice = policy.WhichOneof("policy_choice") if policy is not None else None
    if choice == "all":
        return on_disk
    if choice == "specific":
        return on_disk & set(policy.specific.versions)
    latest = max(policy.latest.num_versions, 1) if policy is not None else 1
    return set(sorted(on_disk)[-latest:])
