"""engine.remote.factory: which plugin classes are built, and with which settings."""

import pytest

from engine.config import BrokerConfig, ConfigError
from engine.remote.factory import (
    KAFKA_TOPIC_BASED_RLMM_CLASS,
    create_remote_log_metadata_manager,
    create_remote_storage_manager,
)
from engine.remote.filesystem import ROOT_DIR_NAME, FileSystemRemoteStorageManager
from engine.remote.storage import RemoteStorageManager


class RecordingRSM(FileSystemRemoteStorageManager):
    """Keeps the configs it was given."""

    def configure(self, configs):
        self.configs = dict(configs)
        super().configure(configs)


class NeedsArguments(RemoteStorageManager):
    def __init__(self, required):
        pass

    copy_log_segment_data = fetch_log_segment = fetch_index = delete_log_segment_data = None


def test_default_rsm_is_the_filesystem_tier_with_prefixed_settings(tmp_path):
    rsm = create_remote_storage_manager(BrokerConfig({
        "broker.id": "3", "rsm.config.dirs": f"{tmp_path}/a,{tmp_path}/b",
        "rsm.config.fsync": "false"}))
    assert type(rsm) is FileSystemRemoteStorageManager
    assert rsm.dirs == [tmp_path / "a", tmp_path / "b"] and rsm.broker_id == 3
    assert (tmp_path / "a" / ROOT_DIR_NAME).is_dir()


def test_custom_prefix_and_class_name_forms(tmp_path):
    for name in (f"{__name__}:RecordingRSM", f"{__name__}.RecordingRSM"):
        rsm = create_remote_storage_manager(BrokerConfig({
            "node.id": "7", "remote.log.storage.manager.class.name": name,
            "remote.log.storage.manager.impl.prefix": "tier.", "tier.dirs": str(tmp_path),
            "tier.custom.key": "x", "rsm.config.dirs": "/ignored"}))
        assert type(rsm) is RecordingRSM
        assert rsm.configs == {"dirs": str(tmp_path), "custom.key": "x", "broker.id": "7"}


def test_missing_or_bad_plugin_setting_names_the_prefixed_key(tmp_path):
    with pytest.raises(ConfigError) as info:
        create_remote_storage_manager(BrokerConfig({}))
    assert info.value.key == "rsm.config.dirs"
    with pytest.raises(ConfigError) as info:
        create_remote_storage_manager(BrokerConfig({"rsm.config.dirs": "relative"}))
    assert info.value.key == "rsm.config.dirs"


@pytest.mark.parametrize("name, rule", [
    ("com.example.tiered.RemoteStorageManager", "cannot import module"),
    ("engine.remote.filesystem:Nope", "has no 'Nope'"),
    ("engine.remote.index_cache:RemoteIndexCache", "is not a engine.remote.storage"),
    ("engine.remote.filesystem:ROOT_DIR_NAME", "is not a"),
    (f"{__name__}:NeedsArguments", "cannot be instantiated"),
])
def test_bad_rsm_class_names_the_key(name, rule):
    with pytest.raises(ConfigError, match=rule) as info:
        create_remote_storage_manager(BrokerConfig({
            "remote.log.storage.manager.class.name": name, "rsm.config.dirs": "/tmp"}))
    assert info.value.key == "remote.log.storage.manager.class.name"


def test_rlmm_class_must_be_an_rlmm(tmp_path):
    with pytest.raises(ConfigError, match="RemoteLogMetadataManager") as info:
        create_remote_log_metadata_manager(BrokerConfig({
            "remote.log.metadata.manager.class.name":
                "engine.remote.filesystem.FileSystemRemoteStorageManager"}), tmp_path)
    assert info.value.key == "remote.log.metadata.manager.class.name"


@pytest.mark.parametrize("name", [None, KAFKA_TOPIC_BASED_RLMM_CLASS,
                                  "engine.remote.embedded_rlmm:EmbeddedRemoteLogMetadataManager"])
def test_default_rlmm_is_the_embedded_one_in_the_first_log_dir(tmp_path, name):
    from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager

    props = {"broker.id": "1", "log.dirs": f"{tmp_path}/l1,{tmp_path}/l2"}
    if name:
        props["remote.log.metadata.manager.class.name"] = name
    with create_remote_log_metadata_manager(BrokerConfig(props), tmp_path / "l1") as rlmm:
        assert type(rlmm) is EmbeddedRemoteLogMetadataManager
        assert rlmm.broker_id == 1
        assert (tmp_path / "l1" / "__remote_log_metadata").is_dir()


def test_a_reader_of_the_embedded_rlmm_takes_no_lock_and_needs_its_directory(tmp_path):
    from engine.remote.embedded_rlmm import EmbeddedRemoteLogMetadataManager
    from engine.remote.factory import open_remote_log_metadata_reader

    config = BrokerConfig({"log.dirs": f"{tmp_path}/logs"})
    with pytest.raises(ConfigError, match="holds no remote log metadata"):
        open_remote_log_metadata_reader(config)
    writer = create_remote_log_metadata_manager(config, f"{tmp_path}/logs")
    try:  # the broker's writer holds the lock; a reader opens beside it
        with open_remote_log_metadata_reader(config) as reader:
            assert isinstance(reader, EmbeddedRemoteLogMetadataManager) and reader.read_only
    finally:
        writer.close()
    moved = BrokerConfig({"log.dirs": f"{tmp_path}/logs",
                          "rlmm.config.metadata.dir": f"{tmp_path}/elsewhere"})
    with pytest.raises(ConfigError, match="rlmm.config.metadata.dir"):
        open_remote_log_metadata_reader(moved)
