"""Topic administration shared by both modes: the rules every CreateTopics,
CreatePartitions, auto-creating Metadata and DeleteTopics is checked against
(:mod:`.rules`), and the interface both implementations serve (:mod:`.admin`)."""
