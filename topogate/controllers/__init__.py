"""The admission shells: the loops that carry the pure core's decisions out through the API
server (the admitter and its pending messages, the job sync, node failures, evictions), and the
Workload writes they share. They sit above the controller state and below `serve`."""
