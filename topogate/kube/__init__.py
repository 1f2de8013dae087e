"""The Kubernetes transport, the bottom layer of the controller's shell: the client
(``client``), the seam it implements (``protocol``), resources and errors, list+watch
reflectors and the Event writer. It knows nothing of queues, topologies or admission."""
