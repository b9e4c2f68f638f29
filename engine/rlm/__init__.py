"""The RemoteLogManager: KIP-405 tiering, remote retention and remote reads over the
engine's local logs (engine.log) and remote plugins (engine.remote).

Modules: `manager` (RemoteLogManager, RunSummary), `partitions` (the registry of the
partitions served), `tasks` (one partition's runs of the tasks: RLMTasks, RunSummary),
`copier` (the copy task: RLMCopier, each partition's CopyState), `expiration` (remote
retention, partition deletion: RLMExpirationTask), `fetch` and `reader` (remote reads:
RemoteLogReader), `offsets` (ListOffsets), `follower` (the follower task, RLMFollowerTask,
and a follower's partition built from the tier, TierStateMachine), `lineage`
(leader-epoch lineage rules), `quota` (KIP-956 quotas), `status` (status()),
`scheduling` (the scheduled tasks: RLMScheduler), `pools` (bounded pools, scheduler,
backoff), `metrics` (Kafka-named Prometheus metrics).
"""

from engine.rlm.manager import RemoteLogManager, RunSummary
from engine.rlm.offsets import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED, parse_spec
from engine.rlm.reader import RemoteFetchResult

__all__ = [
    "EARLIEST",
    "EARLIEST_LOCAL",
    "LATEST",
    "LATEST_TIERED",
    "RemoteFetchResult",
    "RemoteLogManager",
    "RunSummary",
    "parse_spec",
]
