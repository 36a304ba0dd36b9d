"""What autograd saves for backward, tensor by tensor: the context of a micro-batch and its running tally
(``context``), the norms and linears every block uses (``ops``), self-attention (``attention``), one decoder
block, the embedding and the head (``block``), and one pipeline stage's activation bytes (``stage``)."""
