"""The scan core, shared by the faces that read a topic's history straight from the tier
(engine.spark's `kafka-tiered` source and export, engine.arrow's readers and the Iceberg
export) and needing none of them: no pyspark, pyarrow only where Arrow is built.

- `planning`: the lineage of a partition's remote segments and byte ranges of whole batches;
- `tier_options`, `tier`: where a scan reads (a broker's RLMM and RSM, or a bucket alone),
  its segment chains, indexes, aborted transactions and last stable offset;
- `schema`: the row shape of Spark's Kafka source (Spark DDL and Arrow);
- `decode`: a planned range's bytes -> Arrow record batches (the one decoding);
- `tasks`: a task's ranges read through the RSM and decoded (what a Spark task runs);
- `export`: an export's state and the plan of its next round.
"""
