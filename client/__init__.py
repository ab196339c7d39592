"""groupwire client SDK: an async Consumer, Producer and Admin speaking the broker protocol."""
