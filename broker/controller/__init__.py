"""The cluster controller: decisions about brokers and partitions (elections, placement),
made by whichever broker holds the controller lease in the metadata store."""
