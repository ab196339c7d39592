"""``groupwire chaos``: a producer, consumer processes and a seeded fault schedule
(SIGKILL, SIGSTOP past the session timeout, restarts, broker kills), then a verdict on
what the group did: nothing lost, offsets never backwards, no partition owned twice."""
