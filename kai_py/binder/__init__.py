"""The binder (KAI's ``binder``): carries out BindRequests.

``bindqueue`` drives every pending BindRequest to an end; ``binding`` makes one
attempt (GPU reservation pods for shared cards, the GPU ConfigMaps, the Binding)
and rolls back on error; ``pinned_binding`` binds a pod pinned to named cards;
``reservation`` holds the pure rules (names, manifests, retry delays);
``podhints`` is what the binder knows of unbound pods from its pod watch;
``reserve`` is ``kai-py reserve``, the program inside a reservation pod. It
imports the state's converters and the API client, never the pod-grouper.
"""
