"""Kafka's message schemas for the APIs `serve` speaks, as a declarative table.

The facts come from Kafka's `clients/src/main/resources/common/message/*.json`; here each
message is a few lines of the grammar of `engine.message_codec`, which interprets them (one
generic encoder/decoder, no per-field code). One field per line, children indented by two
spaces:

    Name type versions [null=versions] [tag=N] [default=value]

- `type`: int8 int16 int32 int64 uint16 float64 bool uuid string bytes records, `[]int32`
  style arrays of a primitive, `[]` an array of the indented struct, `{}` one struct.
- `versions`: `3+`, `0-7` or `1`: the versions holding the field; `null=` the versions in
  which it may be null; `tag=` makes it a tagged field of the flexible versions (KIP-482).
- `default`: the value of an absent field, and the value a tagged field is omitted at.

Only the versions `serve` accepts are listed (API_VERSIONS: key -> (name, min, max,
first flexible version)); the schemas hold every field of those versions.
"""

from __future__ import annotations

__all__ = ["API_VERSIONS", "NEVER_FLEXIBLE", "REQUEST_HEADER", "RESPONSE_HEADER", "SCHEMAS"]

#: the "first flexible version" of an API that has none
NEVER_FLEXIBLE = 0x7FFF

#: api key -> (name, min version, max version, first flexible version)
API_VERSIONS: dict[int, tuple[str, int, int, int]] = {
    0: ("Produce", 3, 11, 9),
    1: ("Fetch", 4, 16, 12),
    2: ("ListOffsets", 0, 9, 6),
    3: ("Metadata", 0, 12, 9),
    8: ("OffsetCommit", 0, 9, 8),
    9: ("OffsetFetch", 0, 9, 6),
    10: ("FindCoordinator", 0, 5, 3),
    11: ("JoinGroup", 0, 9, 6),
    12: ("Heartbeat", 0, 4, 4),
    13: ("LeaveGroup", 0, 5, 4),
    14: ("SyncGroup", 0, 5, 4),
    15: ("DescribeGroups", 0, 5, 5),
    16: ("ListGroups", 0, 5, 3),
    17: ("SaslHandshake", 1, 1, NEVER_FLEXIBLE),
    18: ("ApiVersions", 0, 4, 3),
    32: ("DescribeConfigs", 0, 4, 4),
    36: ("SaslAuthenticate", 0, 2, 2),
}

#: request header v0-v2: v1 adds the client id (a nullable string, never compact), v2 the
#: tagged fields (read by the codec when the header version is 2)
REQUEST_HEADER = """
RequestApiKey int16 0+
RequestApiVersion int16 0+
CorrelationId int32 0+
ClientId string 1+ null=1+
"""

#: response header v0-v1: v1 adds the tagged fields
RESPONSE_HEADER = """
CorrelationId int32 0+
"""

_NODE_ENDPOINTS = """
  NodeId int32 {v}
  Host string {v}
  Port int32 {v}
  Rack string {v} null={v}
"""

#: api key -> (request schema, response schema)
SCHEMAS: dict[int, tuple[str, str]] = {
    0: ("""
TransactionalId string 3+ null=3+
Acks int16 0+
TimeoutMs int32 0+
TopicData [] 0+
  Name string 0+
  PartitionData [] 0+
    Index int32 0+
    Records records 0+ null=0+
""", """
Responses [] 0+
  Name string 0+
  PartitionResponses [] 0+
    Index int32 0+
    ErrorCode int16 0+
    BaseOffset int64 0+
    LogAppendTimeMs int64 2+ default=-1
    LogStartOffset int64 5+ default=-1
    RecordErrors [] 8+
      BatchIndex int32 8+
      BatchIndexErrorMessage string 8+ null=8+
    ErrorMessage string 8+ null=8+
    CurrentLeader {} 10+ tag=0
      LeaderId int32 10+ default=-1
      LeaderEpoch int32 10+ default=-1
ThrottleTimeMs int32 1+
NodeEndpoints [] 10+ tag=0
""" + _NODE_ENDPOINTS.format(v="10+")),
    1: ("""
ClusterId string 12+ null=12+ tag=0
ReplicaId int32 0-14 default=-1
ReplicaState {} 15+ tag=1
  ReplicaId int32 15+ default=-1
  ReplicaEpoch int64 15+ default=-1
MaxWaitMs int32 0+
MinBytes int32 0+
MaxBytes int32 3+ default=2147483647
IsolationLevel int8 4+
SessionId int32 7+
SessionEpoch int32 7+ default=-1
Topics [] 0+
  Topic string 0-12
  TopicId uuid 13+
  Partitions [] 0+
    Partition int32 0+
    CurrentLeaderEpoch int32 9+ default=-1
    FetchOffset int64 0+
    LastFetchedEpoch int32 12+ default=-1
    LogStartOffset int64 5+ default=-1
    PartitionMaxBytes int32 0+
ForgottenTopicsData [] 7+
  Topic string 7-12
  TopicId uuid 13+
  Partitions []int32 7+
RackId string 11+
""", """
ThrottleTimeMs int32 1+
ErrorCode int16 7+
SessionId int32 7+
Responses [] 0+
  Topic string 0-12
  TopicId uuid 13+
  Partitions [] 0+
    PartitionIndex int32 0+
    ErrorCode int16 0+
    HighWatermark int64 0+
    LastStableOffset int64 4+ default=-1
    LogStartOffset int64 5+ default=-1
    DivergingEpoch {} 12+ tag=0
      Epoch int32 12+ default=-1
      EndOffset int64 12+ default=-1
    CurrentLeader {} 12+ tag=1
      LeaderId int32 12+ default=-1
      LeaderEpoch int32 12+ default=-1
    SnapshotId {} 12+ tag=2
      EndOffset int64 0+ default=-1
      Epoch int32 0+ default=-1
    AbortedTransactions [] 4+ null=4+
      ProducerId int64 4+
      FirstOffset int64 4+
    PreferredReadReplica int32 11+ default=-1
    Records records 0+ null=0+
NodeEndpoints [] 16+ tag=0
""" + _NODE_ENDPOINTS.format(v="16+")),
    2: ("""
ReplicaId int32 0+
IsolationLevel int8 2+
Topics [] 0+
  Name string 0+
  Partitions [] 0+
    PartitionIndex int32 0+
    CurrentLeaderEpoch int32 4+ default=-1
    Timestamp int64 0+
    MaxNumOffsets int32 0 default=1
""", """
ThrottleTimeMs int32 2+
Topics [] 0+
  Name string 0+
  Partitions [] 0+
    PartitionIndex int32 0+
    ErrorCode int16 0+
    OldStyleOffsets []int64 0
    Timestamp int64 1+ default=-1
    Offset int64 1+ default=-1
    LeaderEpoch int32 4+ default=-1
"""),
    3: ("""
Topics [] 0+ null=1+
  TopicId uuid 10+
  Name string 0+ null=10+
AllowAutoTopicCreation bool 4+ default=true
IncludeClusterAuthorizedOperations bool 8-10
IncludeTopicAuthorizedOperations bool 8+
""", """
ThrottleTimeMs int32 3+
Brokers [] 0+
  NodeId int32 0+
  Host string 0+
  Port int32 0+
  Rack string 1+ null=1+
ClusterId string 2+ null=2+
ControllerId int32 1+ default=-1
Topics [] 0+
  ErrorCode int16 0+
  Name string 0+ null=12+
  TopicId uuid 10+
  IsInternal bool 1+
  Partitions [] 0+
    ErrorCode int16 0+
    PartitionIndex int32 0+
    LeaderId int32 0+
    LeaderEpoch int32 7+ default=-1
    ReplicaNodes []int32 0+
    IsrNodes []int32 0+
    OfflineReplicas []int32 5+
  TopicAuthorizedOperations int32 8+ default=-2147483648
ClusterAuthorizedOperations int32 8-10 default=-2147483648
"""),
    8: ("""
GroupId string 0+
GenerationIdOrMemberEpoch int32 1+ default=-1
MemberId string 1+
GroupInstanceId string 7+ null=7+
RetentionTimeMs int64 2-4 default=-1
Topics [] 0+
  Name string 0+
  Partitions [] 0+
    PartitionIndex int32 0+
    CommittedOffset int64 0+
    CommittedLeaderEpoch int32 6+ default=-1
    CommitTimestamp int64 1 default=-1
    CommittedMetadata string 0+ null=0+
""", """
ThrottleTimeMs int32 3+
Topics [] 0+
  Name string 0+
  Partitions [] 0+
    PartitionIndex int32 0+
    ErrorCode int16 0+
"""),
    9: ("""
GroupId string 0-7
Topics [] 0-7 null=2-7
  Name string 0-7
  PartitionIndexes []int32 0-7
Groups [] 8+
  GroupId string 8+
  MemberId string 9+ null=9+
  MemberEpoch int32 9+ default=-1
  Topics [] 8+ null=8+
    Name string 8+
    PartitionIndexes []int32 8+
RequireStable bool 7+
""", """
ThrottleTimeMs int32 3+
Topics [] 0-7
  Name string 0-7
  Partitions [] 0-7
    PartitionIndex int32 0-7
    CommittedOffset int64 0-7
    CommittedLeaderEpoch int32 5-7 default=-1
    Metadata string 0-7 null=0-7
    ErrorCode int16 0-7
ErrorCode int16 2-7
Groups [] 8+
  GroupId string 8+
  Topics [] 8+
    Name string 8+
    Partitions [] 8+
      PartitionIndex int32 8+
      CommittedOffset int64 8+
      CommittedLeaderEpoch int32 8+ default=-1
      Metadata string 8+ null=8+
      ErrorCode int16 8+
  ErrorCode int16 8+
"""),
    10: ("""
Key string 0-3
KeyType int8 1+
CoordinatorKeys []string 4+
""", """
ThrottleTimeMs int32 1+
ErrorCode int16 0-3
ErrorMessage string 1-3 null=1-3
NodeId int32 0-3
Host string 0-3
Port int32 0-3
Coordinators [] 4+
  Key string 4+
  NodeId int32 4+
  Host string 4+
  Port int32 4+
  ErrorCode int16 4+
  ErrorMessage string 4+ null=4+
"""),
    11: ("""
GroupId string 0+
SessionTimeoutMs int32 0+
RebalanceTimeoutMs int32 1+ default=-1
MemberId string 0+
GroupInstanceId string 5+ null=5+
ProtocolType string 0+
Protocols [] 0+
  Name string 0+
  Metadata bytes 0+
Reason string 8+ null=8+
""", """
ThrottleTimeMs int32 2+
ErrorCode int16 0+
GenerationId int32 0+ default=-1
ProtocolType string 7+ null=7+
ProtocolName string 0+ null=7+
Leader string 0+
SkipAssignment bool 9+
MemberId string 0+
Members [] 0+
  MemberId string 0+
  GroupInstanceId string 5+ null=5+
  Metadata bytes 0+
"""),
    12: ("""
GroupId string 0+
GenerationId int32 0+
MemberId string 0+
GroupInstanceId string 3+ null=3+
""", """
ThrottleTimeMs int32 1+
ErrorCode int16 0+
"""),
    13: ("""
GroupId string 0+
MemberId string 0-2
Members [] 3+
  MemberId string 3+
  GroupInstanceId string 3+ null=3+
  Reason string 5+ null=5+
""", """
ThrottleTimeMs int32 1+
ErrorCode int16 0+
Members [] 3+
  MemberId string 3+
  GroupInstanceId string 3+ null=3+
  ErrorCode int16 3+
"""),
    14: ("""
GroupId string 0+
GenerationId int32 0+
MemberId string 0+
GroupInstanceId string 3+ null=3+
ProtocolType string 5+ null=5+
ProtocolName string 5+ null=5+
Assignments [] 0+
  MemberId string 0+
  Assignment bytes 0+
""", """
ThrottleTimeMs int32 1+
ErrorCode int16 0+
ProtocolType string 5+ null=5+
ProtocolName string 5+ null=5+
Assignment bytes 0+
"""),
    15: ("""
Groups []string 0+
IncludeAuthorizedOperations bool 3+
""", """
ThrottleTimeMs int32 1+
Groups [] 0+
  ErrorCode int16 0+
  GroupId string 0+
  GroupState string 0+
  ProtocolType string 0+
  ProtocolData string 0+
  Members [] 0+
    MemberId string 0+
    GroupInstanceId string 4+ null=4+
    ClientId string 0+
    ClientHost string 0+
    MemberMetadata bytes 0+
    MemberAssignment bytes 0+
  AuthorizedOperations int32 3+ default=-2147483648
"""),
    16: ("""
StatesFilter []string 4+
TypesFilter []string 5+
""", """
ThrottleTimeMs int32 1+
ErrorCode int16 0+
Groups [] 0+
  GroupId string 0+
  ProtocolType string 0+
  GroupState string 4+
  GroupType string 5+
"""),
    17: ("""
Mechanism string 0+
""", """
ErrorCode int16 0+
Mechanisms []string 0+
"""),
    36: ("""
AuthBytes bytes 0+
""", """
ErrorCode int16 0+
ErrorMessage string 0+ null=0+
AuthBytes bytes 0+
SessionLifetimeMs int64 1+
"""),
    18: ("""
ClientSoftwareName string 3+
ClientSoftwareVersion string 3+
""", """
ErrorCode int16 0+
ApiKeys [] 0+
  ApiKey int16 0+
  MinVersion int16 0+
  MaxVersion int16 0+
ThrottleTimeMs int32 1+
SupportedFeatures [] 3+ tag=0
  Name string 3+
  MinVersion int16 3+
  MaxVersion int16 3+
FinalizedFeaturesEpoch int64 3+ tag=1 default=-1
FinalizedFeatures [] 3+ tag=2
  Name string 3+
  MaxVersionLevel int16 3+
  MinVersionLevel int16 3+
ZkMigrationReady bool 3+ tag=3
"""),
    32: ("""
Resources [] 0+
  ResourceType int8 0+
  ResourceName string 0+
  ConfigurationKeys []string 0+ null=0+
IncludeSynonyms bool 1+
IncludeDocumentation bool 3+
""", """
ThrottleTimeMs int32 0+
Results [] 0+
  ErrorCode int16 0+
  ErrorMessage string 0+ null=0+
  ResourceType int8 0+
  ResourceName string 0+
  Configs [] 0+
    Name string 0+
    Value string 0+ null=0+
    ReadOnly bool 0+
    IsDefault bool 0
    ConfigSource int8 1+ default=-1
    IsSensitive bool 0+
    Synonyms [] 1+
      Name string 1+
      Value string 1+ null=0+
      Source int8 1+
    ConfigType int8 3+
    Documentation string 3+ null=0+
"""),
}
