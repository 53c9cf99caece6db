"""Live delivery: the WebSockets of the run trace and of the list pages, each web
process's feeds and their fan-out, the sessions the sockets follow, and the trace's
presentation (what a viewer is sent, and what the pages render on load).

Delivery is a doorbell (docs/live_trace.md): the event writer rings "run R has
events up to seq N" after the commit (runs.persistence.broadcast, which stays below with the
writer: runs never imports this package), and the feeds here read from the database
what their viewers are sent."""
