"""The pod-grouper (KAI's ``podgrouper``): which PodGroup a pod belongs to, and the
PodGroup made for it.

``rules`` are the pure grouping rules per owner kind (the top owner, the group's
name, minMember, queue, priority class); ``grouping`` walks a pod's owner chain over
objects given to it (the offline build of ``kai-py simulate`` uses it too);
``service`` is the operator's side: fetch the owners from the API, create the
PodGroup, annotate the pod. It imports the API client but never the binder.
"""
