"""The moments of a training step and the mechanisms that put bytes in them: each module contributes the kinds it
owns to the moments it is live in, with its headline formula (`moments.compose` adds them up)."""
