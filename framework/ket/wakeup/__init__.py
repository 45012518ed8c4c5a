"""Wake-ups: in-process, LISTEN/NOTIFY, the control channel's hints, SQLite datagrams."""
